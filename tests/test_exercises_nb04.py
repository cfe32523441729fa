"""Notebook 04's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_loo(x, y, width):
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)  # (N, N)
    scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))
    return scores.softmax(dim=1) @ y


def with_self(x, y, width):
    return (-((x[:, None] - x[None, :]) ** 2) / (2 * width**2)).softmax(dim=1) @ y


@pytest.mark.parametrize("wrong, says", [
    (with_self, "sees itself"),
    (lambda x, y, w: right_loo(x, y, w**0.5), "squared"),
    (lambda x, y, w: right_loo(x, y, w)[:-1], "shape"),
    (lambda x, y, w: right_loo(x, y, w).fill_(float("nan")), "NaN"),
    (lambda x, y, w: y.clone(), "differ"),
])
def test_41_rejects(wrong, says):
    verdict = check("4.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_41_accepts():
    assert check("4.1", right_loo, quiet=True)

    def loop(x, y, width):  # one point at a time, dropping it from the keys: the same predictions
        out = []
        for i in range(len(x)):
            others = torch.arange(len(x)) != i
            w = torch.softmax(-((x[i] - x[others]) ** 2) / (2 * width**2), dim=0)
            out.append(w @ y[others])
        return torch.stack(out)

    assert check("4.1", loop, quiet=True)



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
