"""Notebook 04's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_causal(T):
    i = torch.arange(T)
    return i[None, :] <= i[:, None]


@pytest.mark.parametrize("wrong, says", [
    (lambda T: ~right_causal(T), "polarity"),
    (lambda T: right_causal(T).T, "transpose"),
    (lambda T: torch.arange(T)[None, :] < torch.arange(T)[:, None], "diagonal is masked"),
    (lambda T: torch.ones(T, T, dtype=torch.bool).tril(1), "next one"),
    (lambda T: right_causal(T).float(), "bool"),
])
def test_41_rejects(wrong, says):
    verdict = check("4.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_41_accepts():
    assert check("4.1", right_causal, quiet=True)


T, D, B = 300, 96, 2
RIGHT_42 = B * (8 * T * D**2 + 4 * T**2 * D)


@pytest.mark.parametrize("wrong, says", [
    (RIGHT_42 // 2, "factor 2"),                       # no batch, or multiply-adds
    (B * (6 * T * D**2 + 4 * T**2 * D), "W_O"),
    (B * (8 * T * D**2 + 2 * T**2 * D), "2T^2d"),
    (B * 8 * T * D**2, "only the projections"),
    ("many", "number"),
])
def test_42_rejects(wrong, says):
    verdict = check("4.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_42_accepts():
    assert check("4.2", RIGHT_42, quiet=True)


def right_masked_softmax(scores, mask):
    scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    return scores.softmax(-1).masked_fill(~mask, 0.0)


@pytest.mark.parametrize("wrong, says", [
    (lambda s, m: s.masked_fill(~m, float("-inf")).softmax(-1), "NaN"),
    (lambda s, m: s.masked_fill(~m, -1e9).softmax(-1), "-1e9"),
    (lambda s, m: right_masked_softmax(s, ~m), "polarity"),
    (lambda s, m: s.softmax(-1) * m, "not the softmax"),  # softmax first, mask after: rows no longer sum to 1
])
def test_43_rejects(wrong, says):
    verdict = check("4.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_43_accepts():
    assert check("4.3", right_masked_softmax, quiet=True)
    assert check("4.3", lambda s, m: s.masked_fill(~m, float("-inf")).softmax(-1).nan_to_num(0.0), quiet=True)
