"""Notebook 09's checkers reject the usual mistakes and accept the right answers (on random maps, no model needed)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlib.exercises import check

g = torch.Generator().manual_seed(0)
ATT = torch.rand(6, 12, 9, 9, generator=g).softmax(-1)  # (layers, heads, L, L)
ROWS, TARGET = ATT[:, :, 5, :], 3  # the row of one query in every head


def right_share(rows, target):
    kept = rows.clone()
    kept[..., [0, -1]] = 0
    return (kept / kept.sum(-1, keepdim=True))[..., target]


@pytest.mark.parametrize("wrong, says", [
    (ROWS[..., TARGET], "renormalised"),
    (torch.cat([ROWS[..., :1] * 0, ROWS[..., 1:]], -1)[..., TARGET] / ROWS[..., 1:].sum(-1), "[CLS] only"),
    (lambda: None, "torch.Tensor"),
    (right_share(ROWS, TARGET)[:, :6], "shape"),
])
def test_91_rejects(wrong, says):
    verdict = check("9.1", wrong, quiet=True, rows=ROWS, target=TARGET)
    assert verdict.ok is False and says in verdict.message


def test_91_accepts():
    assert check("9.1", right_share(ROWS, TARGET), quiet=True, rows=ROWS, target=TARGET)


@pytest.mark.parametrize("wrong, says", [
    (torch.diagonal(ATT, offset=1, dim1=-2, dim2=-1).mean(-1), "next token"),
    (torch.diagonal(ATT, dim1=-2, dim2=-1).mean(-1), "main diagonal"),
    (torch.diagonal(ATT, offset=-1, dim1=-2, dim2=-1).sum(-1), "sum"),
    (torch.diagonal(ATT, offset=-1, dim1=-2, dim2=-1), "shape"),
])
def test_92_rejects(wrong, says):
    verdict = check("9.2", wrong, quiet=True, att=ATT)
    assert verdict.ok is False and says in verdict.message


def test_92_accepts():
    assert check("9.2", torch.diagonal(ATT, offset=-1, dim1=-2, dim2=-1).mean(-1), quiet=True, att=ATT)


def right_pool(hidden, attention_mask):
    m = attention_mask[..., None].to(hidden.dtype)
    return F.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


@pytest.mark.parametrize("wrong, says", [
    (lambda h, m: F.normalize(h.mean(1), dim=-1), "padding is averaged in"),
    (lambda h, m: (h * m[..., None]).sum(1) / m.sum(1, keepdim=True), "unit length"),
    (lambda h, m: F.normalize(h[:, 0], dim=-1), "[CLS]"),
])
def test_93_rejects(wrong, says):
    verdict = check("9.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_93_accepts():
    assert check("9.3", right_pool, quiet=True)
