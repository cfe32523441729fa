"""Checkers for notebook 04's exercises (a leave-one-out soft lookup, FLOPs, the masked softmax)."""
from __future__ import annotations

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
        if torch.isnan(got).any():
            return False, "NaN in the predictions: leave a point out with a -inf score on the diagonal, not by dropping every score"
        right = _loo_reference(x, y, width)
        if torch.allclose(got, right, atol=1e-5):
            continue
        scores = -((x[:, None] - x[None, :]) ** 2) / (2 * width**2)
        if torch.allclose(got, scores.softmax(dim=1) @ y, atol=1e-5):
            return False, "each point still sees itself (the key at its own x scores highest): mask the diagonal out"
        if torch.allclose(got, _loo_reference(x, y, width**0.5), atol=1e-5) or \
                torch.allclose(got, _loo_reference(x, y, (width / 2) ** 0.5), atol=1e-5):
            return False, "the width enters squared: the score is -(x_i - x_j)^2 / (2 width^2)"
        return False, f"with width {width} the predictions differ from the soft lookup over the other points"
    return True, "every point is predicted from the others only, for every width tried"


class _Layer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        from attnlib.attention import scaled_dot_product_attention

        out, _ = scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x))
        return self.w_o(out)


@checker("4.2")
def flops_prediction(answer) -> tuple[bool, str]:
    """The FLOPs of single-head self-attention (d = 96, no bias) on 2 sequences of 300 tokens, as counted."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return False, f"expected a number of FLOPs, got {type(answer).__name__}"
    T, d, batch = 300, 96, 2
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        _Layer(d)(torch.zeros(batch, T, d))
    counted = counter.get_total_flops()
    if answer == counted:
        return True, f"{counted:,} FLOPs, as FlopCounterMode counts them; the 4T^2d term is the larger"
    if answer * 2 == counted:
        return False, "off by a factor 2: either the batch of 2 is missing, or you counted multiply-adds (one per pair) instead of FLOPs (two)"
    if answer == counted - batch * 2 * T * d**2:
        return False, "you forgot the output projection W_O (2Td^2 per sequence)"
    if answer == counted - batch * 2 * T**2 * d:
        return False, "QK^T and weights @ V each cost 2T^2d: the attention term is 4T^2d, not 2T^2d"
    if answer == counted - batch * 4 * T**2 * d:
        return False, "you counted only the projections; the scores QK^T and the weighted sum cost 4T^2d more"
    return False, f"{answer:,} is off by {answer / counted:.2f}x; add 8Td^2 (four projections) and 4T^2d, per sequence"


@checker("4.3")
def masked_softmax_fn(answer) -> tuple[bool, str]:
    """``answer(scores (..., Lk), mask) -> weights``: softmax over allowed keys, 0 elsewhere, all-zero rows if nothing is allowed."""
    require(callable_problem(answer, "a function masked_softmax(scores, mask)"))
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 4, generator=g)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True], [False, False, False, False]])
    mask = mask.expand(2, 3, 4)
    got = answer(scores.clone(), mask)
    require(tensor_problem(got, (2, 3, 4), what="the weights"))
    right = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    if torch.isnan(got).any():
        return False, "a fully masked row gives NaN (softmax of all -inf is 0/0): return zeros for such rows"
    inverted = scores.masked_fill(mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    if torch.allclose(got, inverted, atol=1e-6):
        return False, "the polarity is inverted: True means 'may attend', so fill the scores where the mask is False"
    if torch.allclose(got[:, 2], torch.full((2, 4), 0.25), atol=1e-4):
        return False, "the fully masked row attends uniformly (the -1e9 trap): it must get zero weights"
    if (got[~mask] != 0).any():
        return False, "masked keys must get weight exactly 0"
    if not torch.allclose(got, right, atol=1e-6):
        return False, "the allowed keys' weights are not the softmax of their scores (softmax over the last axis)"
    return True, "masked keys get 0, fully masked rows get zeros, the rest is a softmax"
