"""Notebook 07's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_params(d, h, d_ff):
    return 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * 2 * d


@pytest.mark.parametrize("wrong, says", [
    (lambda d, h, f: right_params(d, h, f) - 4 * d, "short by 4·d_model"),
    (lambda d, h, f: right_params(d, h, f) - 8 * d, "short by 8·d_model"),
    (lambda d, h, f: right_params(d, h, f) + (h - 1) * 4 * (d * d + d), "share"),
    (lambda d, h, f: right_params(d, h, f) - f - d, "feed-forward"),
])
def test_71_rejects(wrong, says):
    verdict = check("7.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_71_accepts():
    assert check("7.1", right_params, quiet=True)


def family(length=12, same_allowed=False, positions=None):
    rows = [[a] * p + [b] + [a] * (length - 1 - p) for a in range(10) for b in range(10) if same_allowed or a != b
            for p in (range(length) if positions is None else positions)]
    return torch.tensor(rows)


@pytest.mark.parametrize("wrong, says", [
    (family(same_allowed=True), "a != b"),
    (family(positions=range(11)), "expected 10 · 9 · 12"),
    (torch.cat([family()[:-1], family()[:1]]), "twice"),
    (family().float(), "integer"),
    (family().T, "one input per row"),
])
def test_72_rejects(wrong, says):
    verdict = check("7.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_72_accepts():
    assert check("7.2", family(), quiet=True)
    assert check("7.2", family()[torch.randperm(1080)], quiet=True)  # any order


def right_post_norm(block, x):
    x = block.norm1(x + block.attn(x, x, x)[0])
    return block.norm2(x + block.ff(x))


@pytest.mark.parametrize("wrong, says", [
    (lambda b, x: (lambda y: y + b.ff(b.norm2(y)))(x + b.attn(*(b.norm1(x),) * 3)[0]), "pre-norm"),
    (lambda b, x: b.norm2(b.ff(b.norm1(b.attn(x, x, x)[0]))), "residual"),
    (lambda b, x: b.norm2(b.norm1(x + b.attn(x, x, x)[0]) + b.ff(x)), "differs"),
])
def test_73_rejects(wrong, says):
    verdict = check("7.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_73_accepts():
    assert check("7.3", right_post_norm, quiet=True)
