"""Notebook 06's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import math

import pytest
import torch

import attnlib
from attnlib.exercises import check

def omega(pe, sin_col=0):
    return torch.atan2(pe[1, sin_col::2], pe[1, 1 - sin_col::2])  # (d/2,)


def by_zero_crossings(pe):  # counts sign changes of each sin column: blind to waves longer than the table
    N = pe.shape[0]
    changes = (torch.sign(pe[1:, 0::2]) != torch.sign(pe[:-1, 0::2])).sum(0).double()
    return 2 * N / changes.clamp_min(1)


@pytest.mark.parametrize("wrong, says", [
    (lambda pe: 1 / omega(pe), "2π"),
    (lambda pe: omega(pe), "frequencies"),
    (lambda pe: (2 * math.pi / omega(pe)).flip(0), "reversed"),
    (lambda pe: 2 * math.pi / omega(pe, sin_col=1), "swapped"),
    (lambda pe: 2 * math.pi / torch.acos(pe[1, 1::2]), "long"),  # cos of a tiny angle is 1 in float32
    (by_zero_crossings, "long"),
    (lambda pe: (2 * math.pi / omega(pe))[:4], "shape"),
    (lambda pe: 2 * math.pi * 10000.0 ** (2 * torch.arange(pe.shape[1] // 2) / pe.shape[1]), "base"),  # assumed 10000
    (2 * math.pi * 10000.0 ** (2 * torch.arange(32) / 64), "function"),
])
def test_61_rejects(wrong, says):
    verdict = check("6.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_61_accepts():
    assert check("6.1", lambda pe: 2 * math.pi / omega(pe), quiet=True)
    assert check("6.1", lambda pe: 2 * math.pi / torch.asin(pe[1, 0::2].double()), quiet=True)  # every ω here is below π/2
    assert check("6.1", lambda pe: 2 * math.pi / omega(pe.double()), quiet=True)


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
    assert check("6.2", lambda q, k, v, s: right_distance(q.double(), k.double(), v.double(), s), quiet=True)  # float64


def gap(block, x, perm, alpha, *, shuffle_pe=False, unshuffle=True, relative=True, per_sequence=False):
    from attnlib import sinusoidal_encoding

    pe = sinusoidal_encoding(x.shape[2], x.shape[1])
    with torch.no_grad():
        out = block(x + alpha * pe)
        shuffled = block(x[:, perm] + alpha * (pe[perm] if shuffle_pe else pe))
        if unshuffle:
            shuffled = shuffled[:, perm.argsort()]
    if per_sequence:  # mean over sequences of each sequence's relative gap: not the gap the task defines
        return float(((shuffled - out).flatten(1).norm(dim=1) / out.flatten(1).norm(dim=1)).mean())
    diff = (shuffled - out).norm()
    return float(diff / out.norm() if relative else diff)


def bisect(tol=1e-4, keep="hi", flip=False, **kw):
    def fn(block, x, perm, target):
        lo, hi = 0.0, 4.0
        while hi - lo > tol:
            mid = (lo + hi) / 2
            below = gap(block, x, perm, mid, **kw) < target
            if below != flip:
                lo = mid
            else:
                hi = mid
        return hi if keep == "hi" else lo
    return fn


@pytest.mark.parametrize("wrong, says", [
    (bisect(shuffle_pe=True), "moved the positions"),  # the gap stays 0: the search ends at 4
    (bisect(unshuffle=False), "perm.argsort()"),
    (bisect(relative=False), "divide by the norm"),
    (bisect(per_sequence=True), "whole (B, T, d)"),  # 0.005 off at target 0.5 on the check's block
    (bisect(flip=True), "wrong half"),
    (lambda b, x, p, t: t, "aiming for"),
    (lambda b, x, p, t: gap(b, x, p, t), "relative gap is"),  # the gap at alpha = target
    (lambda b, x, p, t: "0.2", "a number"),
    (lambda b, x, p, t: bisect(tol=1e-7)(b, x, p, t) + 0.0019, "to within alpha"),  # 0.0019 off
    (bisect()(None, None, None, None) if False else 0.3, "function"),
])
def test_63_rejects(wrong, says):
    verdict = check("6.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_63_accepts():
    assert check("6.3", bisect(), quiet=True)
    assert check("6.3", bisect(keep="lo"), quiet=True)  # either end of the last interval
    assert check("6.3", bisect(tol=1e-3), quiet=True)  # stopped at the tolerance the task asks for
    assert check("6.3", lambda b, x, p, t: torch.tensor(bisect()(b, x, p, t)), quiet=True)  # a 0-d tensor


def test_63_gap_grows_on_the_search_interval():
    # the task says the gap grows with alpha for the check's block, and a bisection over [0, 4] relies on it
    from attnlib.exercises.nb06 import _alpha_problem, _gap

    block, x, perm = _alpha_problem()
    gaps = [_gap(block, x, perm, 0.05 * n) for n in range(81)]  # alpha = 0, 0.05, ..., 4
    assert gaps[0] < 1e-5
    assert all(b > a for a, b in zip(gaps, gaps[1:]))
