"""Checkers for notebook 08's guided tasks (which head does X?): they report the rank of the learner's choice."""
from __future__ import annotations

from typing import Any

import torch

from . import checker


def _choice(answer: Any, scores: torch.Tensor) -> tuple[int, int]:
    """``(layer, head)`` from a pair or from an explorer (its ``.layer`` and ``.head``), checked against ``scores``."""
    if hasattr(answer, "layer") and hasattr(answer, "head"):
        answer = (answer.layer, answer.head)
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and all(isinstance(v, int) for v in answer)):
        raise ValueError(f"expected (layer, head) as two ints, e.g. (0, 2), or the explorer itself; got {answer!r}")
    layer, head = answer
    n_layers, n_heads = scores.shape
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise ValueError(f"layer must be in [0, {n_layers - 1}] and head in [0, {n_heads - 1}], got ({layer}, {head})")
    return layer, head


def _rank(scores: torch.Tensor, layer: int, head: int, lowest_first: bool) -> int:
    """1 = the best head; ties share the better rank."""
    s = scores if lowest_first else -scores
    return 1 + int((s < s[layer, head]).sum())


@checker("8.1")
def positional_head(answer: Any, *, content_dependence: torch.Tensor) -> tuple[bool, str]:
    """Task B: the head whose maps change least when the digits change (lowest ``content_dependence``)."""
    layer, head = _choice(answer, content_dependence)
    n = content_dependence.numel()
    rank = _rank(content_dependence, layer, head, lowest_first=True)
    score, best = content_dependence[layer, head].item(), content_dependence.min().item()
    where = f"layer {layer}, head {head} changes by {score:.3f} on average and ranks {rank} of {n} (1 = changes least)"
    if rank == 1:
        return True, f"{where}; its map is almost the same whatever the digits"
    if rank == n:
        return False, f"{where}: that is the head that depends MOST on the digits; Task B asks for the least"
    return False, f"{where}; the best head changes by only {best:.3f}: look for a difference map that stays dark"
