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


def right_distance(q, k, v, slope):
    i = torch.arange(q.shape[-2])
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5 - slope * (i[:, None] - i[None, :]).abs()  # (B, T, T)
    w = scores.softmax(-1)
    return w @ v, w


def variant(sign=-1.0, absolute=True, scale=True, out_ok=True):
    def fn(q, k, v, slope):
        i = torch.arange(q.shape[-2])
        dist = (i[:, None] - i[None, :]).float()
        dist = dist.abs() if absolute else dist
        w = (q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1) + sign * slope * dist).softmax(-1)
        return (w @ v if out_ok else v, w)
    return fn


@pytest.mark.parametrize("wrong, says", [
    (variant(sign=+1.0), "far keys are favoured"),
    (variant(absolute=False), "absolute value"),
    (variant(scale=False), "sqrt(d)"),
    (variant(out_ok=False), "weights @ v"),
    (lambda q, k, v, s: right_distance(q, k, v, s)[0], "pair"),
    (lambda q, k, v, s: attnlib.scaled_dot_product_attention(q, k, v), "differ"),
])
def test_62_rejects(wrong, says):
    verdict = check("6.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_62_accepts():
    assert check("6.2", right_distance, quiet=True)

    def with_library(q, k, v, slope):  # the bias as a float added to the scores, written differently
        T = q.shape[-2]
        pos = torch.arange(T, dtype=torch.float32)
        bias = -slope * torch.cdist(pos[:, None], pos[:, None], p=1)  # (T, T)
        w = torch.softmax(torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1]) + bias, dim=-1)
        return torch.einsum("bts,bsd->btd", w, v), w

    assert check("6.2", with_library, quiet=True)


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
