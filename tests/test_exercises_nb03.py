"""Notebook 03's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_entropy(p):
    return float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())


@pytest.mark.parametrize("wrong, says", [
    (lambda p: float(-(p * p.clamp_min(1e-12).log2()).sum(-1).mean()), "base 2"),
    (lambda p: float((p * p.clamp_min(1e-12).log()).sum(-1).mean()), "sign"),
    (lambda p: float(-(p * p.log()).sum(-1).mean()), "NaN"),
    (lambda p: float(-(p * p.clamp_min(1e-12).log()).sum()), "summed over the rows"),
])
def test_31_rejects(wrong, says):
    verdict = check("3.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_31_accepts():
    assert check("3.1", right_entropy, quiet=True)


RIGHT_32 = {"general": lambda dq, dk, a: dq * dk, "concat": lambda dq, dk, a: a * (dq + dk) + a,
            "bahdanau": lambda dq, dk, a: a * dq + a * dk + a + a}


@pytest.mark.parametrize("wrong, says", [
    ({**RIGHT_32, "bahdanau": lambda dq, dk, a: a * dq + a * dk + a}, "W_h has a bias"),
    ({**RIGHT_32, "concat": lambda dq, dk, a: a * (dq + dk)}, "do not forget v"),
    ({**RIGHT_32, "general": lambda dq, dk, a: dq * dk + dk}, "no bias"),
    ({**RIGHT_32, "concat": lambda dq, dk, a: a * 2 * dk + a}, "Dq=32, Dk=96"),
    ({"general": RIGHT_32["general"]}, "keys"),
])
def test_32_rejects(wrong, says):
    verdict = check("3.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_32_accepts():
    assert check("3.2", RIGHT_32, quiet=True)


def right_top_k(w, k):
    top = w.topk(k, dim=-1)
    kept = torch.zeros_like(w).scatter(-1, top.indices, top.values)
    return kept / kept.sum(-1, keepdim=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda w, k: torch.zeros_like(w).scatter(-1, w.topk(k, -1).indices, w.topk(k, -1).values), "sum to 1"),
    (lambda w, k: right_top_k(-w, k).abs(), "wrong entries"),
    (lambda w, k: right_top_k(w.T, k).T, "wrong entries"),
    (lambda w, k: w.masked_fill_(w < w.topk(k, -1).values[..., -1:], 0) / w.sum(-1, keepdim=True), "in place"),
])
def test_33_rejects(wrong, says):
    verdict = check("3.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_33_accepts():
    assert check("3.3", right_top_k, quiet=True)
