"""Checkers for notebook 04's exercises (a leave-one-out soft lookup, cross-attention FLOPs, a masked softmax without -inf)."""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from . import checker, require
from .nb00 import callable_problem, tensor_problem


def _loo_reference(x: torch.Tensor, y: torch.Tensor, width: float) -> torch.Tensor:
    scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)  # (N, N)
    scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), float("-inf"))  # nobody sees itself
    return scores.softmax(dim=1) @ y  # (N,)


@checker("4.1")
def leave_one_out_fn(answer) -> tuple[bool, str]:
    """``answer(x (N,), y (N,), width) -> (N,)``: each y_i predicted by the soft lookup over the OTHER points."""
    require(callable_problem(answer, "a function loo_predictions(x, y, width)"))
    g = torch.Generator().manual_seed(1)
    x = (5 * torch.rand(30, generator=g)).sort().values
    y = torch.sin(x) + 0.3 * torch.randn(30, generator=g)
    for width in (0.2, 0.7, 2.0):
        got = answer(x.clone(), y.clone(), width)
        require(tensor_problem(got, (30,), what=f"loo_predictions(x, y, {width}) for 30 points"))
        got = got.detach().to(x.dtype)  # a float64 answer is as right as a float32 one
        if torch.isnan(got).all():  # every prediction: typically a -inf multiplied into the whole score matrix
            return False, ("every prediction is NaN: typically -inf was multiplied into the scores (-inf times 0 is "
                           "NaN), or every key is masked; put -inf on the diagonal only")
        if torch.isnan(got).any():
            return False, "NaN in the predictions: a point's own score must drop out without leaving a row of all -inf"
        right = _loo_reference(x, y, width)
        if torch.allclose(got, right, atol=1e-5):
            continue
        if torch.allclose(got, y, atol=1e-5):  # masked_fill(~eye, -inf): only the diagonal is left
            return False, ("each point sees only itself, so each prediction is its own y: the mask is inverted "
                           "(masked_fill fills where the mask is True)")
        scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
        if torch.allclose(got, scores.softmax(dim=1) @ y, atol=1e-5):
            return False, "each point still sees itself (the key at its own x scores highest): mask the diagonal out"
        if torch.allclose(got, _loo_reference(x, y, width**0.5), atol=1e-5) or \
                torch.allclose(got, _loo_reference(x, y, (width / 2) ** 0.5), atol=1e-5):
            return False, "the width enters squared: the score is -(x_i - x_j)^2 / (2 width^2)"
        return False, f"with width {width} the predictions differ from the soft lookup over the other points"
    return True, "every point is predicted from the others only, for every width tried"


class _CrossAttention(nn.Module):
    """Single-head cross-attention: queries from x_q (d_model), keys and values from x_kv, head width d_k, no biases."""

    def __init__(self, d_model: int, d_k: int):
        super().__init__()
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))
        self.w_o = nn.Linear(d_k, d_model, bias=False)

    def forward(self, x_q, x_kv):
        from attnlib.attention import scaled_dot_product_attention

        out, _ = scaled_dot_product_attention(self.w_q(x_q), self.w_k(x_kv), self.w_v(x_kv))
        return self.w_o(out)


def _counted_cross(Lq: int, Lk: int, d_model: int, d_k: int) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        _CrossAttention(d_model, d_k)(torch.zeros(1, Lq, d_model), torch.zeros(1, Lk, d_model))
    return counter.get_total_flops()


# shapes where every usual mistake gives a different number (Lq != Lk, d_k != d_model, both orders)
_SHAPES_42 = ((7, 20, 48, 16), (30, 5, 24, 40), (12, 12, 64, 8), (1, 50, 32, 32))


@checker("4.2")
def cross_attention_flops_fn(answer) -> tuple[bool, str]:
    """``answer(Lq, Lk, d_model, d_k) -> FLOPs`` of one cross-attention head (one sequence pair), as FlopCounterMode counts."""
    require(callable_problem(answer, "a function cross_attention_flops(Lq, Lk, d_model, d_k)"))
    for Lq, Lk, dm, dk in _SHAPES_42:
        got = answer(Lq, Lk, dm, dk)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, numbers.Real):  # int, float, numpy's int64 and float64...
            return False, f"expected a number of FLOPs, got {type(got).__name__}"
        got = int(got) if isinstance(got, numbers.Integral) else float(got)
        right = _counted_cross(Lq, Lk, dm, dk)
        if got == right:
            continue
        shape = f"Lq={Lq}, Lk={Lk}, d_model={dm}, d_k={dk}"
        proj_q, proj_kv, proj_o = 2 * Lq * dm * dk, 4 * Lk * dm * dk, 2 * Lq * dk * dm
        pairs = 4 * Lq * Lk * dk
        if got in (8 * Lq * dm**2 + 4 * Lq**2 * dm, 8 * Lq * dk**2 + 4 * Lq**2 * dk):
            return False, f"at {shape}: that is the self-attention formula; here Lq != Lk and d_k != d_model"
        if 2 * got == right:
            return False, f"off by a factor 2 at {shape}: count a multiply-add as 2 FLOPs"
        if got == right - proj_o:
            return False, f"at {shape} the output projection W_O (d_k back to d_model) is missing"
        if got == right - pairs // 2:
            return False, f"at {shape}: QK^T and weights @ V are two products of the same size, count both"
        if got in (8 * Lq * dm * dk + 4 * Lq * Lq * dk, 8 * Lk * dm * dk + 4 * Lk * Lk * dk,
                   2 * Lk * dm * dk + 4 * Lq * dm * dk + proj_o + pairs):
            return False, f"at {shape}: the queries come from Lq tokens, the keys and values from Lk tokens"
        if got == proj_q + proj_kv + proj_o + 4 * Lq * Lk * dm:
            return False, f"at {shape}: the scores and the weighted sum run over the head width d_k, not d_model"
        return False, f"at {shape} your count differs from what FlopCounterMode counts"
    return True, "your formula matches FlopCounterMode's count at every shape tried (Lq != Lk, d_k != d_model)"


class _OpLog:
    """Records the names of the aten operations a function runs."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        from torch.utils._pytree import tree_leaves

        names = self.names = set()
        self.minus_inf = False  # did any operation take or make a -inf?
        self.exp_overflow = False  # did an exp() make a +inf?
        log = self

        def has_minus_inf(value):
            if isinstance(value, torch.Tensor):
                return value.is_floating_point() and bool(torch.isneginf(value).any())
            return isinstance(value, float) and value == -math.inf

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                names.add(func.__name__.split(".")[0])
                out = func(*args, **(kwargs or {}))
                if any(has_minus_inf(v) for v in tree_leaves((args, kwargs, out))):
                    log.minus_inf = True
                if func.__name__.split(".")[0] in ("exp", "exp_") and isinstance(out, torch.Tensor):
                    log.exp_overflow |= bool(torch.isposinf(out).any())
                return out

        self.mode = Mode()


def _reference_43(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    right = scores.double().masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    return right.masked_fill(~mask, 0.0).to(scores.dtype)


@checker("4.3")
def stable_masked_softmax_fn(answer) -> tuple[bool, str]:
    """``answer(scores (..., Lk), mask) -> weights`` built from exp, max and sum (no softmax, no -inf):
    safe for scores near 1000 or -1000, for any score on a masked key, and zeros on a row with no allowed key."""
    require(callable_problem(answer, "a function masked_softmax(scores, mask)"))
    from ..attention import masked_softmax as library_masked_softmax  # what attnlib.masked_softmax is

    if answer is library_masked_softmax:
        return False, "that is attnlib's masked_softmax; build your own from exp, max and sum"
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True], [False, False, False, False],
                         [False, True, False, True]])
    mask = mask.expand(2, 4, 4)
    padding = torch.tensor([[True, True, False, True], [True, False, False, False]])[:, None, :]  # (2, 1, 4)
    tries = {  # what -> (scores, mask); the last mask broadcasts over the queries, as a padding mask does
        "ordinary scores": (torch.randn(2, 4, 4, generator=g), mask),
        "scores near 1000": (1000 + 3 * torch.randn(2, 4, 4, generator=g), mask),
        # a 0 left on a masked key sits above every allowed score here: a maximum that counts it underflows exp
        "scores near -1000": (-1000 + 3 * torch.randn(2, 4, 4, generator=g), mask),
        # 1e6 above the rest: exp(-1e6) is 0 even in float64, so subtracting the max of ALL scores shows
        "a masked key with the largest score": (torch.randn(2, 4, 4, generator=g).masked_fill(~mask, 1e6), mask),
        "a (2, 1, 4) mask that broadcasts over the queries": (torch.randn(2, 4, 4, generator=g), padding),
    }
    for what, (scores, mask) in tries.items():
        log = _OpLog()
        with log.mode:
            got = answer(scores.clone(), mask.clone())
        require(tensor_problem(got, (2, 4, 4), what=f"the weights for {what}"))
        got = got.detach().to(scores.dtype)  # a float64 answer is as right as a float32 one
        if log.names & {"_softmax", "_safe_softmax", "_log_softmax", "softmax", "log_softmax"}:
            return False, "it calls a softmax; build the weights from exp, max and sum yourself"
        if log.minus_inf:
            return False, "a -inf appears along the way; the exercise asks for a masked softmax that never uses one"
        if mask.shape != scores.shape:  # the broadcast mask: only the final comparison applies
            if not torch.allclose(got.nan_to_num(-1.0), _reference_43(scores, mask), atol=1e-5):
                return False, f"for {what} the allowed keys' weights are not the softmax of their scores"
            continue
        right = _reference_43(scores, mask)
        inverted = _reference_43(scores, ~mask)
        if torch.allclose(got.nan_to_num(-1.0), inverted, atol=1e-5) and what == "ordinary scores":
            return False, "the polarity is inverted: True means 'may attend', so the keys where the mask is False get 0"
        if torch.isnan(got[:, 2]).any() and not torch.isnan(got[:, :2]).any():
            if log.exp_overflow:  # the NaN came from exp() making an inf (then inf * 0), not from dividing 0 by 0
                return False, ("the row with no allowed key gives NaN for " + what + ": there exp(score minus your "
                               "subtracted value) overflows to inf, and inf * 0 = NaN; keep every exponent at or "
                               "below 0 on such a row too, or choose the values with torch.where instead of "
                               "multiplying by the mask")
            return False, "the row with no allowed key gives NaN (0 / 0): clamp the row sum away from 0"
        if what == "scores near -1000" and not (got.sum(-1)[mask.any(-1)] > 0.5).all():  # NaN > 0.5 is False too
            return False, ("for scores near -1000 the rows with allowed keys lose their weights: the maximum must be "
                           "over the ALLOWED scores; a 0 on a masked key sits above scores that are all very "
                           "negative, and every weight underflows to 0")
        if torch.isnan(got).any() or torch.isinf(got).any():
            if what == "scores near 1000":
                return False, "scores near 1000 give NaN: exp(1000) overflows float32; subtract each row's largest score first"
            return False, f"NaN or inf in the weights for {what}"
        if torch.allclose(got[:, 2], torch.full((2, 4), 0.25), atol=1e-4):  # before the next test, which it fails too
            return False, "the row with no allowed key attends uniformly: it must get zero weights"
        if (got[~mask] != 0).any():
            return False, "masked keys must get weight exactly 0"
        if what == "a masked key with the largest score" and torch.allclose(got[:, 0], torch.zeros(2, 4)):
            return False, ("a masked key with a large score wipes out its row: subtract the largest ALLOWED score, "
                           "not the largest of all")
        if not torch.allclose(got, right, atol=1e-5):
            return False, f"for {what} the allowed keys' weights are not the softmax of their scores (over the last axis)"
    return True, ("masked keys get 0, an empty row gets zeros, and scores near 1000 or -1000 (and any score on a "
                  "masked key) do no harm")
