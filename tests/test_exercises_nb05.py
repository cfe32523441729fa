"""Notebook 05's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_head(mha, x, j):
    rows = slice(j * mha.d_k, (j + 1) * mha.d_k)
    q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]  # (B, T, d_k)
    k = x @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
    return (q @ k.transpose(-2, -1) / mha.d_k**0.5).softmax(-1)


def by_view(mha, x, j):  # project everything, then take head j's block of outputs: the same weights
    B, T, d = x.shape
    q = mha.w_q(x).view(B, T, mha.num_heads, mha.d_k)[:, :, j]
    k = mha.w_k(x).view(B, T, mha.num_heads, mha.d_k)[:, :, j]
    return torch.softmax(q @ k.transpose(-2, -1) / mha.d_k**0.5, dim=-1)


def scaled_by(mha, x, j, s):
    rows = slice(j * mha.d_k, (j + 1) * mha.d_k)
    q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
    k = x @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
    return (q @ k.transpose(-2, -1) / s).softmax(-1)


@pytest.mark.parametrize("wrong, says", [
    (lambda m, x, j: m(x, x, x)[1][:, j], "instead of calling"),
    (lambda m, x, j: right_head(m, x, j).transpose(-2, -1), "transposed"),
    (lambda m, x, j: scaled_by(m, x, j, m.d_model**0.5), "d_k = d_model / h"),
    (lambda m, x, j: right_head(m, x, (j + 1) % m.num_heads), "another head"),
    (lambda m, x, j: ((x @ m.w_q.weight[j * m.d_k:(j + 1) * m.d_k].T) @ (x @ m.w_k.weight[j * m.d_k:(j + 1) * m.d_k].T)
                      .transpose(-2, -1) / m.d_k**0.5).softmax(-1), "biases"),
    (lambda m, x, j: (x @ m.w_q.weight[:, j * m.d_k:(j + 1) * m.d_k] @ (x @ m.w_k.weight[:, j * m.d_k:(j + 1) * m.d_k])
                      .transpose(-2, -1)).softmax(-1), "differ"),
    (lambda m, x, j: right_head(m, x, j)[0], "shape"),
])
def test_51_rejects(wrong, says):
    verdict = check("5.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_51_accepts():
    assert check("5.1", right_head, quiet=True)


def test_51_rejects_calling_the_projection():  # cell 10's split on the projection's output bypasses the slicing
    verdict = check("5.1", by_view, quiet=True)
    assert verdict.ok is False and "instead of calling the projection" in verdict.message, verdict.message


def test_51_messages_do_not_give_the_rows_away():
    for wrong in (lambda m, x, j: torch.full((x.shape[0], x.shape[1], x.shape[1]), 1 / x.shape[1]),
                  lambda m, x, j: right_head(m, x, (j + 1) % m.num_heads)):
        message = check("5.1", wrong, quiet=True).message
        assert "*d_k" not in message and "rows" not in message, message


def by_attributes(mha, x, j):  # reads the sizes from the projections instead of mha.d_k: also right
    d_k = mha.w_q.out_features // mha.num_heads
    rows = slice(j * d_k, (j + 1) * d_k)
    q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
    k = x @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
    assert mha.w_q.in_features == mha.d_model == x.shape[-1]
    return (q @ k.transpose(-2, -1) / d_k**0.5).softmax(-1)


def test_51_accepts_attribute_reads():  # the copy handed to the learner reads like the real layer
    verdict = check("5.1", by_attributes, quiet=True)
    assert verdict.ok, verdict.message


@pytest.mark.parametrize("wrong, says", [
    (lambda m, x, j: m.forward(x, x, x)[1][:, j], "instead of calling mha"),
    (lambda m, x, j: right_head(m, x, j) + 0 * m.w_q.forward(x).sum(), "instead of calling the projection"),
])
def test_51_refuses_forward(wrong, says):
    verdict = check("5.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_51_leaves_the_global_generator_alone():  # the learner's random numbers do not depend on running the check
    torch.manual_seed(3)
    before = torch.get_rng_state()
    check("5.1", right_head, quiet=True)
    assert torch.equal(torch.get_rng_state(), before)


SHIFT = torch.eye(8).roll(1, dims=1)  # row j = e_(j+1): key j matches query j + 1


@pytest.mark.parametrize("wrong, says", [
    ((4 * torch.eye(8), 4 * SHIFT.T), "NEXT"),
    ((4 * torch.eye(8), 4 * torch.eye(8)), "itself"),
    ((torch.eye(8), SHIFT), "scale the matrices up"),
    ((torch.eye(8), torch.eye(8)[:, :4]), "same shape"),
    ((torch.eye(8)[:5], SHIFT[:5]), "shape (T, d_k)"),
    (torch.eye(8), "pair"),
    ((4 * torch.eye(8), 4 * SHIFT.roll(1, dims=1)), "likes key"),
])
def test_52_rejects(wrong, says):
    verdict = check("5.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_52_accepts():
    assert check("5.2", (4 * torch.eye(8), 4 * SHIFT), quiet=True)
    assert check("5.2", (SHIFT.T * 5, torch.eye(8) * 5), quiet=True)  # the shift on the query side: the same scores
    assert check("5.2", (10 * torch.eye(8)[:, :], 10 * SHIFT), quiet=True)  # any scale large enough


def window(h, T, cmp=lambda dist, heads: dist <= heads, one_side=False):
    i = torch.arange(T)
    d = i[:, None] - i[None, :]
    dist = d if one_side else d.abs()
    mask = cmp(dist[None, None], torch.arange(h)[None, :, None, None])
    return mask & (d >= 0) if one_side else mask


@pytest.mark.parametrize("wrong, says", [
    (lambda h, T: ~window(h, T), "polarity"),
    (lambda h, T: window(h, T, cmp=lambda d, j: d < j), "sees nothing"),
    (lambda h, T: window(h, T, cmp=lambda d, j: d == j), "exactly j away"),
    (lambda h, T: window(h, T, one_side=True), "one side"),
    (lambda h, T: window(h, T)[0], "shape"),
    (lambda h, T: window(h, T).float(), "bool"),
    (lambda h, T: window(h, T, cmp=lambda d, j: d <= j + 1), "head 0"),
    (lambda h, T: window(h, T).flip(1), "head 0"),  # heads in the wrong order
    (window(4, 6), "function"),
])
def test_53_rejects(wrong, says):
    verdict = check("5.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_53_accepts():
    assert check("5.3", window, quiet=True)

    def with_loop(h, T):  # a loop over heads and pairs gives the same mask
        mask = torch.zeros(1, h, T, T, dtype=torch.bool)
        for j in range(h):
            for a in range(T):
                for b in range(T):
                    mask[0, j, a, b] = abs(a - b) <= j
        return mask

    assert check("5.3", with_loop, quiet=True)


def test_51_accepts_float64():  # a learner who computes in float64 is right too
    assert check("5.1", lambda m, x, j: scores_of(m, x, j).double().softmax(-1), quiet=True)


def by_columns(mha, x, j):  # the head's slice taken from the columns of the (out, in) weight
    cols = slice(j * mha.d_k, (j + 1) * mha.d_k)
    q = x @ mha.w_q.weight[:, cols] + mha.w_q.bias[cols]
    k = x @ mha.w_k.weight[:, cols] + mha.w_k.bias[cols]
    return (q @ k.transpose(-2, -1) / mha.d_k**0.5).softmax(-1)


@pytest.mark.parametrize("wrong, says", [
    (lambda m, x, j: scaled_by(m, x, j, 1.0), "not scaled"),
    (lambda m, x, j: scores_of(m, x, j).softmax(-2), "wrong axis"),
    (by_columns, "not columns"),
])
def test_51_names_the_usual_slips(wrong, says):
    verdict = check("5.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def scores_of(mha, x, j):
    rows = slice(j * mha.d_k, (j + 1) * mha.d_k)
    q = x @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
    k = x @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
    return q @ k.transpose(-2, -1) / mha.d_k**0.5
