"""Checkers for notebook 02's exercises (Bahdanau attention)."""
from __future__ import annotations

import torch

from . import checker
from .nb00 import callable_problem, tensor_problem


@checker("2.1")
def additive_weights_by_hand(answer) -> tuple[bool, str]:
    """``answer(att, query (B, Dq), keys (B, L, Dk), mask (B, L)) -> weights (B, L)`` from att.W_s, att.W_h, att.v."""
    from attnlib.rnn_attention import AdditiveAttention

    problem = callable_problem(answer, "a function additive_weights(att, query, keys, mask)")
    if problem:
        return False, problem
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    att = AdditiveAttention(6, 10, attn_dim=5)
    query, keys = torch.randn(3, 6, generator=g), torch.randn(3, 7, 10, generator=g)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, 2:] = False
    with torch.no_grad():
        _, right = att(query, keys, mask)
        got = answer(att, query, keys, mask)
    problem = tensor_problem(got, (3, 7), what="the weights")
    if problem:
        return False, problem
    got = got.detach()
    if torch.isnan(got).any():
        return False, "your weights contain NaN; fill masked scores with -inf only where the mask is False"
    if not torch.allclose(got.sum(-1), torch.ones(3), atol=1e-5):
        return False, "each row of weights must sum to 1: apply a softmax over the keys (the last axis)"
    if (got[~mask] > 1e-6).any():
        return False, "masked keys (the padding) get weight: set their scores to -inf before the softmax"
    if not torch.allclose(got, right, atol=1e-5):
        with torch.no_grad():
            no_tanh = att.v(att.W_s(query)[:, None] + att.W_h(keys)).squeeze(-1)
        if torch.allclose(got, no_tanh.masked_fill(~mask, float("-inf")).softmax(-1), atol=1e-5):
            return False, "the tanh is missing: score = v . tanh(W_s s + W_h h)"
        return False, "the weights differ from AdditiveAttention's: score = v . tanh(W_s s + W_h h), then a masked softmax"
    return True, "your weights equal AdditiveAttention's"


@checker("2.2")
def batch_source_mask(answer, batch: torch.Tensor, pad_id: int) -> tuple[bool, str]:
    """The (B, L) source mask of a padded batch: True for the real characters."""
    problem = tensor_problem(answer, tuple(batch.shape), what="the mask")
    if problem:
        return False, problem
    if answer.dtype != torch.bool:
        return False, f"attnlib masks are bool (True = real key), got {answer.dtype}; compare with == or !="
    right = batch != pad_id
    if torch.equal(answer, ~right):
        return False, "the polarity is inverted: True must mark the real characters, False the padding"
    if answer.all():
        return False, "every position is True, so the short date's padding would get weight"
    if not torch.equal(answer, right):
        b, i = (answer != right).nonzero()[0].tolist()
        return False, f"sequence {b}, position {i}: should be {bool(right[b, i])}"
    return True, "True on the real characters, False on the padding"


def format1_century(ids: torch.Tensor, data) -> tuple[list[int], float]:
    """The test dates written like 27.11.31 and the share of them whose first two output digits are right."""
    fmt1 = [i for i, text in enumerate(data.src_raw) if len(text) == 8 and text[2] == "." and text[5] == "."]
    right = sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in fmt1)
    return fmt1, right / max(len(fmt1), 1)


@checker("2.3")
def century_accuracy(answer, ids: torch.Tensor, data) -> tuple[bool, str]:
    """The share of format-1 test dates (dd.mm.yy) whose century (first two output digits) is right."""
    try:
        got = float(answer)
    except (TypeError, ValueError):
        return False, f"expected a number (a share between 0 and 1), got {type(answer).__name__}"
    fmt1, truth = format1_century(ids, data)
    if abs(got - truth) < 1e-9:
        return True, f"{len(fmt1)} dates in format 1, century right in {truth:.3f} of them"
    everyone = sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in range(len(data.src_raw))) / len(data.src_raw)
    first_only = sum(int(ids[i, 0]) == int(data.tgt[i, 0]) for i in fmt1) / max(len(fmt1), 1)
    if abs(got - everyone) < 1e-9:
        return False, "that is over all test dates; keep only those written like 27.11.31, where the century is not in the input"
    if abs(got - first_only) < 1e-9:
        return False, "you compared only the first digit; the century is two digits (19 or 20)"
    if abs(got - len(fmt1)) < 1e-9 or got > 1:
        return False, "give a share between 0 and 1, not a count"
    return False, f"{got:.4f} is not the share of format-1 dates with the right century"
