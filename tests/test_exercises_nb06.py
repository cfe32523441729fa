"""Notebook 06's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib.exercises import check

I = torch.arange(32, dtype=torch.float64)
RIGHT_61 = 2 * math.pi * 10000.0 ** (2 * I / 64)


@pytest.mark.parametrize("wrong, says", [
    (10000.0 ** (2 * I / 64), "2π"),
    (2 * math.pi * 10000.0 ** (I / 64), "2i/d"),
    (10000.0 ** (-2 * I / 64), "frequencies"),
    (RIGHT_61.flip(0), "reversed"),
    (RIGHT_61[:16], "shape"),
])
def test_61_rejects(wrong, says):
    verdict = check("6.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_61_accepts():
    assert check("6.1", RIGHT_61, quiet=True)
    assert check("6.1", RIGHT_61.float(), quiet=True)


TABLE = attnlib.sinusoidal_encoding(64, 1000)


def right_where(vec):
    return int((TABLE @ vec).argmax())


@pytest.mark.parametrize("wrong, says", [
    (lambda v: int((TABLE == v).all(dim=1).nonzero()[0]) if (TABLE == v).all(dim=1).any() else -1, "exact match"),
    (lambda v: int((TABLE @ v).argmax()) + 1, "one off"),
    (lambda v: int((TABLE @ v).argmin()), "largest dot product"),
    (lambda v: TABLE @ v, "one position"),
])
def test_62_rejects(wrong, says):
    verdict = check("6.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_62_accepts():
    assert check("6.2", right_where, quiet=True)
    assert check("6.2", lambda v: int((TABLE - v).norm(dim=1).argmin()), quiet=True)  # nearest by distance works too


def gap(block, x, perm, alpha, *, shuffle_pe=False, unshuffle=True, relative=True):
    from attnlib import sinusoidal_encoding

    pe = sinusoidal_encoding(x.shape[2], x.shape[1])
    with torch.no_grad():
        out = block(x + alpha * pe)
        shuffled = block(x[:, perm] + alpha * (pe[perm] if shuffle_pe else pe))
        if unshuffle:
            shuffled = shuffled[:, perm.argsort()]
    diff = (shuffled - out).norm()
    return float(diff / out.norm() if relative else diff)


@pytest.mark.parametrize("wrong, says", [
    (lambda b, x, p, a: gap(b, x, p, a, shuffle_pe=True), "moved the positions"),
    (lambda b, x, p, a: gap(b, x, p, a, unshuffle=False), "undo the shuffle"),
    (lambda b, x, p, a: gap(b, x, p, a, relative=False), "divide by the norm"),
])
def test_63_rejects(wrong, says):
    verdict = check("6.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_63_accepts():
    assert check("6.3", gap, quiet=True)
