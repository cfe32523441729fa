"""Notebook 05's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_split(x, h):
    B, T, d = x.shape
    return x.view(B, T, h, d // h).transpose(1, 2)


def right_merge(heads):
    B, h, T, d_k = heads.shape
    return heads.transpose(1, 2).reshape(B, T, h * d_k)


@pytest.mark.parametrize("wrong, says", [
    (lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1), "plain reshape"),
    (lambda x, h: x.view(*x.shape[:2], h, -1), "transpose the token and head axes"),
    (lambda x, h: x.view(*x.shape[:2], -1, h).permute(0, 3, 1, 2), "consecutive features"),
    (lambda x, h: x.view(*x.shape[:2], h, -1).permute(0, 2, 1, 3).flip(1), "wrong places"),
])
def test_51_rejects(wrong, says):
    verdict = check("5.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_51_accepts():
    assert check("5.1", right_split, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda t: t.reshape(t.shape[0], t.shape[2], -1), "without transposing"),
    (lambda t: t.transpose(1, 2), "shape"),
    (lambda t: t.permute(0, 2, 3, 1).reshape(t.shape[0], t.shape[2], -1), "give x back"),
])
def test_52_rejects(wrong, says):
    verdict = check("5.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_52_accepts():
    assert check("5.2", right_merge, quiet=True)


LEFT = torch.ones(5, 5, dtype=torch.bool).tril()
ALL = torch.ones(5, 5, dtype=torch.bool)
RIGHT_53 = torch.stack([LEFT, LEFT.T, ALL, ALL])[None]


@pytest.mark.parametrize("wrong, says", [
    (~RIGHT_53, "polarity"),
    (torch.stack([LEFT.T, LEFT, ALL, ALL])[None], "swapped"),
    (RIGHT_53[0], "shape"),
    (torch.stack([LEFT, LEFT.T, ALL, LEFT])[None], "head 3"),
])
def test_53_rejects(wrong, says):
    verdict = check("5.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_53_accepts():
    assert check("5.3", RIGHT_53, quiet=True)
