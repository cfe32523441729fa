"""Checkers for notebook 00's exercises (the mask convention, shapes and parameter counts).

``tensor_problem`` is shared by the other notebooks' checkers: it names what is wrong with
an answer that should be a tensor of a given shape (and dtype), or returns None.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from . import checker


def tensor_problem(answer: Any, shape: tuple[int, ...] | None = None, dtype: torch.dtype | None = None,
                   what: str = "your answer") -> str | None:
    """A sentence saying why ``answer`` is not a tensor of ``shape`` and ``dtype``, or None if it is."""
    if not isinstance(answer, torch.Tensor):
        return f"expected {what} to be a torch.Tensor, got {type(answer).__name__}"
    if shape is not None and tuple(answer.shape) != tuple(shape):
        return f"expected {what} to have shape {tuple(shape)}, got {tuple(answer.shape)}"
    if dtype is not None and answer.dtype != dtype:
        return f"expected {what} to have dtype {dtype}, got {answer.dtype}"
    return None


def callable_problem(answer: Any, what: str = "a function") -> str | None:
    """A sentence saying that ``answer`` is not callable, or None."""
    if not callable(answer):
        return f"expected {what}, got {type(answer).__name__}: define it with def and pass the function itself"
    return None


@checker("0.1")
def causal_mask_6(answer) -> tuple[bool, str]:
    """A (6, 6) bool causal mask, True = may attend."""
    problem = tensor_problem(answer, (6, 6))
    if problem:
        return False, problem
    if answer.dtype != torch.bool:
        return False, f"expected dtype torch.bool (True = may attend), got {answer.dtype}"
    right = torch.ones(6, 6, dtype=torch.bool).tril()
    if torch.equal(answer, ~right):
        return False, "the polarity is inverted: in attnlib True means 'may attend'"
    if torch.equal(answer, right.T):
        return False, "this is the transpose: row i is query i, and it may see keys 0..i (the past), not i..5"
    if torch.equal(answer, torch.ones(6, 6, dtype=torch.bool).tril(-1)):
        return False, "the diagonal is masked: a token may attend to itself"
    wrong = (answer != right).nonzero()
    if len(wrong):
        i, j = wrong[0].tolist()
        what = "may see the future token" if j > i else "is blocked from the earlier token"
        return False, f"row {i} {what} {j}"
    return True, "each token sees itself and everything before it"


@checker("0.2")
def mha_shapes_and_count(answer) -> tuple[bool, str]:
    """Predicted facts about MultiHeadAttention(d_model=64, num_heads=8) on x of shape (3, 10, 64).

    ``answer`` is a dict with keys "output", "weights" (shapes as tuples), "d_k" and "parameters" (ints).
    """
    from attnlib.multihead import MultiHeadAttention

    keys = {"output", "weights", "d_k", "parameters"}
    if not isinstance(answer, dict) or set(answer) != keys:
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        return False, f"expected a dict with the keys {sorted(keys)}, got {got}"
    mha = MultiHeadAttention(d_model=64, num_heads=8)
    with torch.no_grad():
        out, weights = mha(*(torch.zeros(3, 10, 64),) * 3)
    truth = {"output": tuple(out.shape), "weights": tuple(weights.shape), "d_k": mha.d_k,
             "parameters": sum(p.numel() for p in mha.parameters())}
    for key in ("output", "weights"):
        got = tuple(answer[key]) if isinstance(answer[key], (tuple, list, torch.Size)) else answer[key]
        if got != truth[key]:
            if key == "weights" and got == (3, 10, 10):
                return False, "the weights keep one (Lq, Lk) map per head: their shape has a heads axis"
            if key == "weights" and got == (3, 8, 10, 8):
                return False, "the weights are (B, heads, Lq, Lk): one weight per query and key, not per dimension"
            return False, f"the {key} shape {got} is not right; run the module and look at .shape"
    if answer["d_k"] != truth["d_k"]:
        return False, f"d_k = {answer['d_k']} is not right: each head gets d_model / num_heads dimensions"
    n = answer["parameters"]
    if n != truth["parameters"]:
        if n == 4 * 64 * 64:
            return False, "you counted the four 64 x 64 matrices but not their biases (64 each)"
        if n in (8 * (4 * 64 * 8 + 4 * 8), 8 * 4 * (64 * 64 + 64)):
            return False, "the heads do not have their own full matrices: they share four d_model x d_model projections"
        return False, f"{n} parameters is not right: count W_q, W_k, W_v, W_o and their biases"
    return True, f"output {truth['output']}, weights {truth['weights']}, d_k {truth['d_k']}, {truth['parameters']:,} parameters"


@checker("0.3")
def padding_mask_for_mha(answer) -> tuple[bool, str]:
    """A mask for a batch of 2 sentences of 6 and 3 tokens padded to 6, broadcasting to (2, heads, 6, 6)."""
    problem = tensor_problem(answer, dtype=torch.bool, what="the mask")
    if problem:
        return False, problem
    if answer.dim() != 4:
        return False, (f"the mask has shape {tuple(answer.shape)}; give it four axes (B, heads, Lq, Lk), "
                       "with size 1 where it is the same for all, e.g. (2, 1, 1, 6)")
    try:
        full = answer.expand(2, 2, 6, 6)
    except RuntimeError:
        return False, f"a mask of shape {tuple(answer.shape)} does not broadcast to (B=2, heads=2, Lq=6, Lk=6)"
    keep = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    right = keep[:, None, None, :].expand(2, 2, 6, 6)
    if torch.equal(full, ~right):
        return False, "the polarity is inverted: True means 'may attend', so the real tokens are True"
    if torch.equal(full, keep[:, None, :, None].expand(2, 2, 6, 6)):
        return False, "you masked the queries (rows) instead of the keys (columns): the padding must not be attended TO"
    if torch.equal(full, torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :].expand(2, 2, 6, 6)):
        return False, "off by one: sentence 2 has 3 real tokens, positions 0, 1 and 2"
    if not torch.equal(full, right):
        b, h, q, k = (full != right).nonzero()[0].tolist()
        return False, f"sentence {b + 1}, query {q}: key {k} should be {bool(right[b, h, q, k])}"
    from attnlib.multihead import MultiHeadAttention

    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _, w = MultiHeadAttention(d_model=8, num_heads=2)(x, x, x, mask=answer)
    return True, f"weight on the padding of sentence 2 is {w[1, :, :, 3:].sum().item():.1f} in every head"


@checker("0.4")
def to_pytorch_mask(answer: Callable) -> tuple[bool, str]:
    """A function turning an attnlib mask (True = may attend) into nn.MultiheadAttention's (True = blocked)."""
    problem = callable_problem(answer, "a function to_pytorch_mask(mask)")
    if problem:
        return False, problem
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    before = causal.clone()
    got = answer(causal)
    if not torch.equal(causal, before):
        return False, "your function changed its input mask in place; return a new tensor"
    problem = tensor_problem(got, (5, 5), what="the returned mask")
    if problem:
        return False, problem
    if got.dtype != torch.bool:
        return False, f"return a bool mask (True = blocked for PyTorch), got {got.dtype}"
    if torch.equal(got, causal):
        return False, "you returned the mask unchanged: PyTorch reads True as 'blocked', so every token would see only the future"
    if torch.equal(got, ~causal.T) or torch.equal(got, causal.T):
        return False, "the result is transposed: keep rows = queries and columns = keys, only flip True and False"
    if not torch.equal(got, ~causal):
        return False, "the result is not the causal mask with True and False swapped"
    g = torch.Generator().manual_seed(1)
    ours = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(1, 5, 16, generator=g)
    with torch.no_grad():
        blocked_future, _ = ours(x, x, x, attn_mask=got)
        x2 = x.clone()
        x2[0, -1] += 1.0  # change the last token: no earlier output may move
        moved, _ = ours(x2, x2, x2, attn_mask=answer(causal))
    if not torch.allclose(blocked_future[0, :-1], moved[0, :-1], atol=1e-6):
        return False, "with your mask an earlier output still changes when the last token changes"
    return True, "~mask, and with it no output of nn.MultiheadAttention depends on a later token"
