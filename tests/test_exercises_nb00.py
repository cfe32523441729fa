"""Notebook 00's checkers reject the mistakes learners make and accept every answer the evidence cannot tell apart."""
from __future__ import annotations

import pytest
import torch

from attnlib import causal_mask, padding_mask
from attnlib.exercises import check

CAUSAL = causal_mask(6)
REAL = padding_mask([6, 4], max_len=6)  # (2, 6)


def _fn(mask_of):
    """A decoder_mask(lengths, L) that builds its mask with ``mask_of(causal (L, L), real (B, L))``."""
    def decoder_mask(lengths, L):
        pos = torch.arange(L)
        causal = pos[None, :] <= pos[:, None]  # (L, L): key <= query
        real = pos[None, :] < torch.tensor(lengths)[:, None]  # (B, L)
        return mask_of(causal, real)
    return decoder_mask


def test_01_accepts_the_combined_mask_and_its_variants():
    assert check("0.1", _fn(lambda c, r: c & r[:, None, None, :]), quiet=True)
    assert check("0.1", _fn(lambda c, r: (c & r[:, None, None, :]).expand(-1, 2, -1, -1).clone()), quiet=True)
    assert check("0.1", _fn(lambda c, r: c & r[:, None, :, None] & r[:, None, None, :]), quiet=True)  # padding queries blocked
    assert check("0.1", _fn(lambda c, r: c & r[:, None, :, None]), quiet=True)  # padding on the queries: the same mask
    # the padding queries' rows are not judged: their outputs are thrown away
    assert check("0.1", _fn(lambda c, r: c & (r[:, None, None, :] | torch.eye(len(c), dtype=torch.bool))), quiet=True)
    assert check("0.1", _fn(lambda c, r: (c & r[:, None, None, :]) | ~r[:, None, :, None]), quiet=True)  # all True


def _fixed(mask):
    return lambda lengths, L: mask


@pytest.mark.parametrize("wrong, says", [
    (_fn(lambda c, r: c | r[:, None, None, :]), "'or'"),
    (_fn(lambda c, r: ~(c & r[:, None, None, :])), "polarity"),
    (_fn(lambda c, r: c[None, None].expand(len(r), 1, -1, -1)), "causal mask alone"),
    (_fn(lambda c, r: r[:, None, None, :].expand(-1, 1, r.shape[1], -1)), "padding mask alone"),
    (_fn(lambda c, r: c.T & r[:, None, None, :]), "transposed"),
    (lambda lengths, L: (torch.arange(L)[None, :] <= torch.arange(L)[:, None])  # real = pos <= length: one too many
     & (torch.arange(L)[None, :] <= torch.tensor(lengths)[:, None])[:, None, None, :], "off by one"),
    (_fn(lambda c, r: c[None] & r[:, None, :]), "four axes"),  # (B, L, L): no heads axis
    (_fn(lambda c, r: (c & r[:, None, None, :]).float()), "bool"),
    (_fixed(CAUSAL & REAL[:, None, None, :]), "wrong for lengths"),  # the first example's mask, whatever the arguments
    (lambda lengths, L: causal_mask(L) & padding_mask(lengths, max_len=L)[:, None, None, :], "build both conditions"),
    (CAUSAL & REAL[:, None, None, :], "expected a function"),
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
    (lambda d, h, f: sum(p.numel() for p in __import__("attnlib").TransformerBlock(d, h, f).parameters()), "formula"),
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
    lambda m: (~m).float() * -1e3,  # exp(-1000) is 0 in float32: no weight gets through, the result is right
])
def test_03_accepts_minus_inf_and_very_negative_numbers(right):
    assert check("0.3", right, quiet=True)


def test_03_leaves_the_global_generator_alone():
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check("0.3", lambda m: torch.zeros(m.shape).masked_fill(~m, float("-inf")), quiet=True)
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("wrong, says", [
    (lambda m: m.float(), "nothing is blocked"),
    (lambda m: ~m, "bool mask"),
    (lambda m: torch.zeros(m.shape).masked_fill(m, float("-inf")), "polarity"),
    (lambda m: (~m).float() * -1.0, "still gets weight"),
    (lambda m: torch.zeros(m.shape).masked_fill(~m.T, float("-inf")), "allowed position must get 0"),
    (lambda m: m.int() - 1, "float"),
    (lambda m: torch.full((5, 5), float("-inf")).triu(1), "shape"),  # ignores its input: right only for a 5 x 5 causal mask
    (lambda m: torch.full(m.shape, float("-inf")).triu(1), "not causal"),  # ignores everything but the size
])
def test_03_rejects(wrong, says):
    verdict = check("0.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("wrong, yours, should", [
    (_fn(lambda c, r: (c & r[:, None, None, :]).index_put((torch.tensor(1), torch.tensor(0), torch.tensor(3),
                                                           torch.tensor(0)), torch.tensor(False))), "may not", "may"),
    (lambda lengths, L: (torch.arange(L)[None, :] < torch.arange(L)[:, None])  # '<' instead of '<=': no query sees itself
     & (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :], "may not", "may"),
    (lambda lengths, L: (torch.arange(L)[None, :] <= torch.arange(L)[:, None] + 1)  # one later key let in
     & (torch.arange(L)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :], "may", "may not"),
])
def test_01_says_which_way_the_mask_is_wrong(wrong, yours, should):
    verdict = check("0.1", wrong, quiet=True)
    assert verdict.ok is False and f"in your mask it {yours} attend" in verdict.message, verdict.message
    assert verdict.message.endswith(f"but it {should}"), verdict.message
