"""Notebook 04's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_loo(x, y, width):
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)  # (N, N)
    scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))
    return scores.softmax(dim=1) @ y


def with_self(x, y, width):
    return (-((x[:, None] - x[None, :]) ** 2) / (2 * width**2)).softmax(dim=1) @ y


def minus_inf_times_eye(x, y, width):  # a natural slip: multiply -inf by the identity matrix
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
    return (scores - float("inf") * torch.eye(len(x))).softmax(dim=1) @ y


def row_of_minus_inf(x, y, width):  # the diagonal masked, and by mistake all of the first row too
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
    blocked = torch.eye(len(x), dtype=torch.bool)
    blocked[0] = True
    return scores.masked_fill(blocked, float("-inf")).softmax(dim=1) @ y


def inverted_mask(x, y, width):  # masked_fill fills where the mask is True: ~eye leaves only the diagonal
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
    return scores.masked_fill(~torch.eye(len(x), dtype=torch.bool), float("-inf")).softmax(dim=1) @ y


def every_key_masked(x, y, width):
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
    return scores.masked_fill(torch.ones(len(x), len(x), dtype=torch.bool), float("-inf")).softmax(dim=1) @ y


@pytest.mark.parametrize("wrong, says", [
    (with_self, "sees itself"),
    (lambda x, y, w: right_loo(x, y, w**0.5), "squared"),
    (lambda x, y, w: right_loo(x, y, w)[:-1], "shape"),
    (lambda x, y, w: right_loo(x, y, w).fill_(float("nan")), "NaN"),
    (minus_inf_times_eye, "-inf times 0"),  # every off-diagonal score is -inf * 0 = NaN, no row is all -inf
    (row_of_minus_inf, "row of all -inf"),  # the first point's whole row masked: only its prediction is NaN
    (lambda x, y, w: y.clone(), "sees only itself"),
    (inverted_mask, "inverted"),  # only the diagonal left: each prediction is its own y
    (every_key_masked, "every key is masked"),  # all NaN, and no -inf multiplied in
    (lambda x, y, w: right_loo(x, y, w) + 0.1, "differ"),
])
def test_41_rejects(wrong, says):
    verdict = check("4.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_41_accepts():
    assert check("4.1", right_loo, quiet=True)

    def loop(x, y, width):  # one point at a time, dropping it from the keys: the same predictions
        out = []
        for i in range(len(x)):
            others = torch.arange(len(x)) != i
            w = torch.softmax(-((x[i] - x[others]) ** 2) / (2 * width**2), dim=0)
            out.append(w @ y[others])
        return torch.stack(out)

    assert check("4.1", loop, quiet=True)
    assert check("4.1", lambda x, y, w: right_loo(x.double(), y.double(), w), quiet=True)  # float64 is right too



def right_cross_flops(Lq, Lk, d_model, d_k):
    return 2 * Lq * d_model * d_k + 2 * 2 * Lk * d_model * d_k + 2 * 2 * Lq * Lk * d_k + 2 * Lq * d_k * d_model


@pytest.mark.parametrize("wrong, says", [
    (lambda Lq, Lk, dm, dk: right_cross_flops(Lq, Lk, dm, dk) // 2, "factor 2"),  # multiply-adds
    (lambda Lq, Lk, dm, dk: right_cross_flops(Lq, Lk, dm, dk) - 2 * Lq * dk * dm, "W_O"),
    (lambda Lq, Lk, dm, dk: right_cross_flops(Lq, Lk, dm, dk) - 2 * Lq * Lk * dk, "count both"),
    (lambda Lq, Lk, dm, dk: 8 * Lq * dm**2 + 4 * Lq**2 * dm, "self-attention formula"),  # section 7's table, copied
    (lambda Lq, Lk, dm, dk: 8 * Lq * dm * dk + 4 * Lq * Lq * dk, "Lk tokens"),  # Lk forgotten
    (lambda Lq, Lk, dm, dk: 2 * Lk * dm * dk + 4 * Lq * dm * dk + 2 * Lq * dk * dm + 4 * Lq * Lk * dk, "Lk tokens"),
    (lambda Lq, Lk, dm, dk: 8 * Lq * dm * dk - 4 * Lq * dm * dk + 4 * Lk * dm * dk + 4 * Lq * Lk * dm, "head width d_k"),
    (lambda Lq, Lk, dm, dk: right_cross_flops(Lq, Lk, dm, dk) + 1, "differs"),
    (lambda Lq, Lk, dm, dk: "many", "number"),
    (12345, "function"),
])
def test_42_rejects(wrong, says):
    verdict = check("4.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_42_accepts():
    assert check("4.2", right_cross_flops, quiet=True)
    assert check("4.2", lambda Lq, Lk, dm, dk: float(right_cross_flops(Lq, Lk, dm, dk)), quiet=True)
    assert check("4.2", lambda Lq, Lk, dm, dk: torch.tensor(right_cross_flops(Lq, Lk, dm, dk)), quiet=True)
    np = pytest.importorskip("numpy")
    assert check("4.2", lambda Lq, Lk, dm, dk: np.int64(right_cross_flops(Lq, Lk, dm, dk)), quiet=True)
    assert check("4.2", lambda Lq, Lk, dm, dk: np.float64(right_cross_flops(Lq, Lk, dm, dk)), quiet=True)
    # grouped differently: (2Lq + 4Lk + 2Lq) d_model d_k + 4 Lq Lk d_k
    assert check("4.2", lambda Lq, Lk, dm, dk: 4 * dm * dk * (Lq + Lk) + 4 * Lq * Lk * dk, quiet=True)


def right_masked_softmax(scores, mask):
    allowed_max = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).amax(-1, keepdim=True)
    e = (scores - allowed_max).clamp_max(0).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)


def where_version(scores, mask):  # another right answer: torch.where instead of multiplying by the mask
    m = torch.where(mask, scores, torch.full_like(scores, -3e38)).amax(-1, keepdim=True)  # the largest ALLOWED
    e = torch.where(mask, (scores - m).exp(), torch.zeros_like(scores))  # an empty row's inf is never chosen
    s = e.sum(-1, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


def no_max(scores, mask):
    e = scores.exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def max_over_all(scores, mask):
    e = (scores - scores.amax(-1, keepdim=True)).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def no_clamp(scores, mask):
    allowed_max = scores.masked_fill(~mask, -1e30).amax(-1, keepdim=True)
    e = (scores - allowed_max).clamp_max(0).exp() * mask
    return e / e.sum(-1, keepdim=True)


def with_minus_inf(scores, mask):
    allowed_max = scores.masked_fill(~mask, float("-inf")).amax(-1, keepdim=True)
    e = (scores - allowed_max).exp().nan_to_num(0.0) * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def no_clamp_max(scores, mask):  # the row's max taken over the allowed keys, but the exponent not kept <= 0
    m = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).amax(-1, keepdim=True)
    e = (scores - m).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def max_of_masked_product(scores, mask):  # the max over scores * mask: 0 on an empty row, so exp(1000) overflows
    e = (scores - (scores * mask).amax(-1, keepdim=True)).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def max_with_masked_zeros(scores, mask):  # the max over scores * mask, exponent clamped: fine unless all allowed < 0
    e = (scores - (scores * mask).amax(-1, keepdim=True)).clamp_max(0).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(1e-30)


def filled_zero_max(scores, mask):  # the same slip with masked_fill(~mask, 0)
    e = (scores - scores.masked_fill(~mask, 0).amax(-1, keepdim=True)).clamp_max(0).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)


def max_over_all_float64(scores, mask):  # the max of ALL scores, in float64: survives a masked score only 200 above
    s = scores.double()
    e = (s - s.amax(-1, keepdim=True)).exp() * mask
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(s.dtype).tiny)


def large_negative_fill(scores, mask):  # masked keys filled with -1e4: an empty row comes out uniform
    s = scores.masked_fill(~mask, -1e4)
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def same_shape_only(scores, mask):
    assert mask.shape == scores.shape
    return right_masked_softmax(scores, mask)


@pytest.mark.parametrize("wrong, says", [
    (no_max, "1000"),
    (max_over_all, "ALLOWED"),
    (max_over_all_float64, "ALLOWED"),
    (max_with_masked_zeros, "underflows"),
    (filled_zero_max, "underflows"),
    (no_clamp, "clamp"),
    (no_clamp_max, "overflows to inf"),  # it clamps the row sum already: "clamp the sum" would be the wrong advice
    (max_of_masked_product, "overflows to inf"),
    (large_negative_fill, "attends uniformly"),
    (lambda s, m: right_masked_softmax(s, ~m), "polarity"),
    (lambda s, m: s.masked_fill(~m, float("-inf")).softmax(-1).nan_to_num(0.0), "softmax"),
    (lambda s, m: s.masked_fill(~m, -1e9).softmax(-1), "softmax"),
    (lambda s, m: (s - s.amax(-1, keepdim=True)).exp() * m, "not the softmax"),  # never normalised
    (with_minus_inf, "-inf"),  # right numbers, but by the route the exercise rules out
    (same_shape_only, "AssertionError"),  # the exercise promises a mask that broadcasts
    (lambda s, m: right_masked_softmax(s, m) if m.shape == s.shape else torch.full_like(s, 0.25), "broadcasts"),
    (None, "not attempted"),
])
def test_43_rejects(wrong, says):
    verdict = check("4.3", wrong, quiet=True)
    assert not verdict.ok and says in verdict.message, verdict.message


def test_43_rejects_the_library():
    import attnlib

    verdict = check("4.3", attnlib.masked_softmax, quiet=True)
    assert verdict.ok is False and "attnlib" in verdict.message


def test_43_accepts():
    assert check("4.3", right_masked_softmax, quiet=True)
    assert check("4.3", where_version, quiet=True)
    assert check("4.3", lambda s, m: right_masked_softmax(s.double(), m), quiet=True)  # float64 is right too
