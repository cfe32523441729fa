"""Notebook 09's checkers reject the usual mistakes and accept the right answers (on random maps, no model needed)."""
from __future__ import annotations

import pytest
import torch

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
    (torch.diagonal(ATT, offset=-1, dim1=-2, dim2=-1).sum(-1) / ATT.shape[-1], "divided by L"),
])
def test_92_rejects(wrong, says):
    verdict = check("9.2", wrong, quiet=True, att=ATT)
    assert verdict.ok is False and says in verdict.message


def test_92_accepts():
    assert check("9.2", torch.diagonal(ATT, offset=-1, dim1=-2, dim2=-1).mean(-1), quiet=True, att=ATT)


def rollout(att, reduce=lambda a: a.mean(0), residual=True, order="left"):
    eye = torch.eye(att.shape[-1])
    out = eye
    for layer in att:
        m = 0.5 * reduce(layer) + 0.5 * eye if residual else reduce(layer)
        out = m @ out if order == "left" else out @ m
    return out


def rollout_loop_rows(att):  # the same, written with explicit renormalisation and float64
    att = att.double()
    out = torch.eye(att.shape[-1], dtype=torch.float64)
    for layer in range(att.shape[0]):
        m = att[layer].mean(0) + torch.eye(att.shape[-1], dtype=torch.float64)
        m = m / m.sum(-1, keepdim=True)
        out = m @ out
    return out


@pytest.mark.parametrize("wrong, says", [
    (lambda a: rollout(a, order="right"), "reversed"),
    (lambda a: rollout(a, residual=False), "residual is missing"),
    (lambda a: rollout(a, reduce=lambda x: x.amax(0)), "mean over the heads"),
    (lambda a: 0.5 * a[-1].mean(0) + 0.5 * torch.eye(a.shape[-1]), "last layer alone"),
    (lambda a: a.mean(1).sum(0), "added"),
    (lambda a: rollout(a, reduce=lambda x: x[0]), "rollout differs"),   # one head only
    (lambda a: a.mean(1), "shape"),
    (torch.eye(6), "function"),
    (lambda a: rollout(torch.stack([a[i] for i in range(6)])), "raised"),             # six layers hard-coded
    (lambda a: rollout(a[:4]), "rollout differs"),                                     # four layers hard-coded
])
def test_93_rejects(wrong, says):
    verdict = check("9.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


@pytest.mark.parametrize("right", [rollout, rollout_loop_rows,
                                   lambda a: (r := rollout(a)) / r.sum(-1, keepdim=True)])
def test_93_accepts(right):
    assert check("9.3", right, quiet=True)
