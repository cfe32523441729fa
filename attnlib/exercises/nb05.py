"""Checkers for notebook 05's exercises (splitting and merging heads, per-head masks)."""
from __future__ import annotations

import torch

from . import checker
from .nb00 import callable_problem, tensor_problem


def _x(B: int = 2, T: int = 5, d: int = 12) -> torch.Tensor:
    return torch.arange(B * T * d, dtype=torch.float32).reshape(B, T, d)


@checker("5.1")
def split_heads_fn(answer) -> tuple[bool, str]:
    """``answer(x (B, T, d_model), h) -> (B, h, T, d_model // h)``; head j holds features j*d_k .. (j+1)*d_k - 1."""
    problem = callable_problem(answer, "a function split_heads(x, h)")
    if problem:
        return False, problem
    x, h = _x(), 3
    right = x.view(2, 5, 3, 4).transpose(1, 2)  # (B, h, T, d_k)
    got = answer(x.clone(), h)
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 5, 3, 4):
        return False, "the shape is (B, T, h, d_k): transpose the token and head axes to get (B, h, T, d_k)"
    problem = tensor_problem(got, (2, 3, 5, 4), what="split_heads(x, 3) for x of shape (2, 5, 12)")
    if problem:
        return False, problem
    if torch.equal(got, x.reshape(2, 3, 5, 4)):
        return False, "a plain reshape to (B, h, T, d_k) has the right shape and wrong numbers: view as (B, T, h, d_k), then transpose(1, 2)"
    if torch.equal(got, x.view(2, 5, 4, 3).permute(0, 3, 1, 2)):
        return False, "head j must own consecutive features j*d_k .. (j+1)*d_k - 1, not every h-th feature"
    if not torch.equal(got, right):
        return False, "the values are in the wrong places: got[b, j, t] should be x[b, t, j*d_k:(j+1)*d_k]"
    return True, "(B, T, d) -> view (B, T, h, d_k) -> transpose -> (B, h, T, d_k)"


@checker("5.2")
def merge_heads_fn(answer) -> tuple[bool, str]:
    """``answer(heads (B, h, T, d_k)) -> (B, T, h * d_k)``, the inverse of splitting."""
    problem = callable_problem(answer, "a function merge_heads(heads)")
    if problem:
        return False, problem
    x = _x()
    heads = x.view(2, 5, 3, 4).transpose(1, 2)  # (B, h, T, d_k), as split_heads makes it
    got = answer(heads.clone())
    problem = tensor_problem(got, (2, 5, 12), what="merge_heads of a (2, 3, 5, 4) tensor")
    if problem:
        return False, problem
    if torch.equal(got, heads.reshape(2, 5, 12)):
        return False, "reshape without transposing back: the shape is right but each token gets pieces of other tokens"
    if not torch.equal(got, x):
        return False, "merge_heads(split_heads(x)) should give x back exactly"
    return True, "transpose back to (B, T, h, d_k), then reshape to (B, T, d_model); the round trip gives x back"


@checker("5.3")
def per_head_mask(answer, T: int = 5) -> tuple[bool, str]:
    """A (1, 4, T, T) mask: head 0 left + itself, head 1 right + itself, heads 2 and 3 everything."""
    problem = tensor_problem(answer, (1, 4, T, T), what="the mask")
    if problem:
        return False, problem
    if answer.dtype != torch.bool:
        return False, f"expected a bool mask (True = may attend), got {answer.dtype}"
    left = torch.ones(T, T, dtype=torch.bool).tril()
    everything = torch.ones(T, T, dtype=torch.bool)
    right = torch.stack([left, left.T, everything, everything])[None]
    if torch.equal(answer, ~right):
        return False, "the polarity is inverted: True means 'may attend'"
    if torch.equal(answer[0, 0], left.T) and torch.equal(answer[0, 1], left):
        return False, "heads 0 and 1 are swapped: row i is query i, so 'left' means keys 0..i (the lower triangle)"
    for head, name in ((0, "left and itself"), (1, "right and itself"), (2, "everything"), (3, "everything")):
        if not torch.equal(answer[0, head], right[0, head]):
            return False, f"head {head} should see {name}"
    return True, "one (T, T) mask per head, broadcast over the batch"
