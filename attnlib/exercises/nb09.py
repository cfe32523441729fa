"""Checkers for notebook 09's exercises (all-MiniLM-L6-v2: the sink, a previous-token head, mean pooling)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import checker
from .nb00 import callable_problem, tensor_problem


@checker("9.1")
def share_without_sink(answer, rows: torch.Tensor, target: int) -> tuple[bool, str]:
    """``answer`` (layers, heads): the weight of ``rows`` (layers, heads, L) on ``target`` once the first and
    last token ([CLS], [SEP]) are dropped and each row is renormalised to sum to 1."""
    layers, heads, L = rows.shape
    problem = tensor_problem(answer, (layers, heads), what="the shares")
    if problem:
        return False, problem
    kept = rows.clone()
    kept[..., [0, L - 1]] = 0
    right = (kept / kept.sum(-1, keepdim=True))[..., target]
    got = answer.detach().to(right.dtype)
    if torch.allclose(got, rows[..., target], atol=1e-5) or torch.allclose(got, kept[..., target], atol=1e-5):
        return False, "the rows are not renormalised: after dropping [CLS] and [SEP], divide each row by its new sum"
    no_sep = rows.clone()
    no_sep[..., 0] = 0
    if torch.allclose(got, (no_sep / no_sep.sum(-1, keepdim=True))[..., target], atol=1e-5):
        return False, "you dropped [CLS] only; [SEP] (the last token) is a sink too"
    other_axis = kept[..., target] / kept.sum(-2, keepdim=True)[..., target]
    if torch.allclose(got, other_axis, atol=1e-5):
        return False, "renormalise over the keys (the last axis), not over the heads"
    if not torch.allclose(got, right, atol=1e-5):
        return False, "the shares differ: zero columns 0 and L-1, divide by the row sum, then take the target column"
    best = int(right.flatten().argmax())
    return True, f"without the sink the largest share is {right.flatten()[best]:.2f}, in L{best // heads}H{best % heads}"


@checker("9.2")
def previous_token_weight(answer, att: torch.Tensor) -> tuple[bool, str]:
    """``answer`` (layers, heads): the mean weight each head puts on the previous token, from ``att`` (layers, heads, L, L)."""
    layers, heads, L, _ = att.shape
    problem = tensor_problem(answer, (layers, heads), what="the mean weight on the previous token")
    if problem:
        return False, problem
    got = answer.detach().to(att.dtype)
    right = torch.diagonal(att, offset=-1, dim1=-2, dim2=-1).mean(-1)
    if torch.allclose(got, torch.diagonal(att, offset=1, dim1=-2, dim2=-1).mean(-1), atol=1e-5):
        return False, "that is the next token: row i is the query, so the previous token is column i - 1 (offset=-1)"
    if torch.allclose(got, torch.diagonal(att, dim1=-2, dim2=-1).mean(-1), atol=1e-5):
        return False, "that is the main diagonal (each token on itself); the previous token is one below it"
    if torch.allclose(got, torch.diagonal(att, offset=-1, dim1=-2, dim2=-1).sum(-1), atol=1e-5):
        return False, "that is the sum along the diagonal; take the mean"
    if not torch.allclose(got, right, atol=1e-5):
        return False, "the values differ: take the diagonal just below the main one (entries [i, i-1]) and average it"
    best = int(right.flatten().argmax())
    return True, f"L{best // heads}H{best % heads} puts {right.flatten()[best]:.2f} on the previous token on average"


@checker("9.3")
def mean_pool_fn(answer) -> tuple[bool, str]:
    """``answer(hidden (B, L, d), attention_mask (B, L) of 0/1) -> (B, d)``: mean over real tokens, unit length."""
    problem = callable_problem(answer, "a function mean_pool(hidden, attention_mask)")
    if problem:
        return False, problem
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 8, generator=g) + 0.5
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]])
    got = answer(hidden.clone(), attention_mask.clone())
    problem = tensor_problem(got, (3, 8), what="the pooled vectors")
    if problem:
        return False, problem
    got = got.detach()
    m = attention_mask[..., None].float()
    mean = (hidden * m).sum(1) / m.sum(1)
    right = F.normalize(mean, dim=-1)
    if torch.allclose(got, F.normalize(hidden.mean(1), dim=-1), atol=1e-5):
        return False, "the padding is averaged in: sum over the real tokens only and divide by their number"
    if torch.allclose(got, mean, atol=1e-5):
        return False, "the vectors are not unit length: divide each by its L2 norm (F.normalize)"
    if torch.allclose(got, F.normalize(hidden[:, 0], dim=-1), atol=1e-5):
        return False, "that is the [CLS] vector; all-MiniLM-L6-v2 averages all real tokens"
    if not torch.allclose(got, right, atol=1e-5):
        return False, "the vectors differ from the normalised mean of the real tokens"
    return True, "the mean over real tokens, normalised to unit length"
