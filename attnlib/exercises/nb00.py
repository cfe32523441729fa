"""Checkers for notebook 00's exercises (the mask convention)."""
from __future__ import annotations

import torch

from . import checker


@checker("0.1")
def causal_mask_6(answer) -> tuple[bool, str]:
    """A (6, 6) bool causal mask, True = may attend."""
    if not isinstance(answer, torch.Tensor):
        return False, f"expected a torch.Tensor, got {type(answer).__name__}"
    if answer.shape != (6, 6):
        return False, f"expected shape (6, 6), got {tuple(answer.shape)}"
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
    return True, "correct: each token sees itself and everything before it"
