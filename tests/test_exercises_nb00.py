"""Notebook 00's checkers reject the mistakes learners make and accept every answer the evidence cannot tell apart."""
from __future__ import annotations

import pytest
import torch

from attnlib import causal_mask, padding_mask
from attnlib.exercises import check

CAUSAL = causal_mask(6)
REAL = padding_mask([6, 4], max_len=6)  # (2, 6)


def test_01_accepts_the_combined_mask_and_its_variants():
    right = CAUSAL & REAL[:, None, None, :]  # (2, 1, 6, 6)
    assert check("0.1", right, quiet=True)
    assert check("0.1", right.expand(2, 2, 6, 6).clone(), quiet=True)  # already expanded over the heads
    blocked = right.clone()
    blocked[1, :, 4:] = False  # the padding queries attend to nothing: outputs thrown away anyway
    assert check("0.1", blocked, quiet=True)
    assert check("0.1", CAUSAL & REAL[:, None, :, None], quiet=True)  # padding on the queries: the same mask here


@pytest.mark.parametrize("wrong, says", [
    (CAUSAL | REAL[:, None, None, :], "'or'"),
    (~(CAUSAL & REAL[:, None, None, :]), "polarity"),
    (CAUSAL[None, None].expand(2, 1, 6, 6), "causal mask alone"),
    (REAL[:, None, None, :].expand(2, 1, 6, 6), "padding mask alone"),
    (CAUSAL.T & REAL[:, None, None, :], "transposed"),
    (CAUSAL & padding_mask([6, 3], max_len=6)[:, None, None, :], "off by one"),
    (CAUSAL[None] & REAL[:, None, :], "four axes"),  # (B, L, L): no heads axis
    ((CAUSAL & REAL[:, None, None, :]).float(), "bool"),
])
def test_01_rejects(wrong, says):
    verdict = check("0.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def right_block(d, h, d_ff):
    return 4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d


def test_02_accepts():
    assert check("0.2", right_block, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda d, h, f: right_block(d, h, f) - 4 * d, "LayerNorms are missing"),
    (lambda d, h, f: right_block(d, h, f) - 2 * d, "one LayerNorm"),
    (lambda d, h, f: 4 * d * d + 2 * d * f, "biases"),
    (lambda d, h, f: right_block(d, h, f) - d * d - d, "W_o"),
    (lambda d, h, f: right_block(d, h, f) - f * d - d, "two layers"),
    (lambda d, h, f: right_block(d, h, f) + (h - 1) * 4 * d * d, "number of heads"),
    (lambda d, h, f: 2224, "not the block's count"),
])
def test_02_rejects(wrong, says):
    verdict = check("0.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_02_never_prints_the_count():
    verdict = check("0.2", lambda d, h, f: 1, quiet=True)
    assert "2,224" not in verdict.message and "2224" not in verdict.message


@pytest.mark.parametrize("right", [
    lambda m: torch.zeros(m.shape).masked_fill(~m, float("-inf")),
    lambda m: torch.where(m, 0.0, -1e9),
    lambda m: (~m).float() * -1e4,
])
def test_03_accepts_minus_inf_and_very_negative_numbers(right):
    assert check("0.3", right, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda m: m.float(), "nothing is blocked"),
    (lambda m: ~m, "bool mask"),
    (lambda m: torch.zeros(m.shape).masked_fill(m, float("-inf")), "polarity"),
    (lambda m: (~m).float() * -1.0, "still lets weight through"),
    (lambda m: torch.zeros(m.shape).masked_fill(~m.T, float("-inf")), "allowed position must get 0"),
    (lambda m: m.int() - 1, "float"),
])
def test_03_rejects(wrong, says):
    verdict = check("0.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message
