"""Checkers for notebook 06's exercises (wavelengths, a distance bias inside attention, shuffled content)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


@checker("6.1")
def wavelengths_64(answer) -> tuple[bool, str]:
    """The 32 wavelengths (in positions) of the sinusoidal table with d_model = 64, pair 0 first."""
    require(tensor_problem(answer, (32,), what="the wavelengths"))
    i = torch.arange(32, dtype=torch.float64)
    right = 2 * math.pi * 10000.0 ** (2 * i / 64)
    got = answer.detach().double()
    if torch.allclose(got, right.flip(0), rtol=1e-4):
        return False, "the order is reversed: pair 0 (dimensions 0 and 1) has the shortest wavelength"
    if torch.allclose(got, right / (2 * math.pi), rtol=1e-4):
        return False, "you forgot the 2π: sin(p ω) repeats when p ω grows by 2π, so λ = 2π / ω"
    if torch.allclose(got, 1 / right * 2 * math.pi, rtol=1e-4) or torch.allclose(got, 1 / right, rtol=1e-4):
        return False, "those are frequencies; the wavelength is 2π divided by the frequency"
    if torch.allclose(got, 2 * math.pi * 10000.0 ** (i / 64), rtol=1e-4):
        return False, "the exponent is 2i/d, not i/d: pair i uses dimensions 2i and 2i + 1"
    if not torch.allclose(got, right, rtol=1e-4):
        return False, f"pair 0 should repeat every {right[0]:.2f} positions and pair 31 every {right[-1]:.0f}"
    return True, f"from {right[0]:.2f} to {right[-1]:,.0f} positions"


def _biased(q, k, v, slope, sign=-1.0, absolute=True, scale=True):
    T = q.shape[-2]
    i = torch.arange(T)
    dist = (i[:, None] - i[None, :]).float()  # (T, T): query i, key j
    dist = dist.abs() if absolute else dist
    scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1.0) + sign * slope * dist
    w = scores.softmax(-1)
    return w @ v, w


@checker("6.2")
def distance_bias_fn(answer) -> tuple[bool, str]:
    """``answer(q, k, v (B, T, d), slope) -> (out, weights)``: softmax(q k^T / sqrt(d) - slope * |i - j|) v."""
    require(callable_problem(answer, "a function distance_attention(q, k, v, slope)"))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 6, 8, generator=g) for _ in range(3))
    for slope in (0.0, 0.5, 2.0):
        got = answer(q.clone(), k.clone(), v.clone(), slope)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, "return a pair (out, weights), like attnlib.scaled_dot_product_attention"
        out, w = got
        for name, t, shape in (("out", out, (2, 6, 8)), ("weights", w, (2, 6, 6))):
            require(tensor_problem(t, shape, what=name))
        right_out, right_w = _biased(q, k, v, slope)
        if torch.allclose(w, right_w, atol=1e-5) and torch.allclose(out, right_out, atol=1e-5):
            continue
        if slope and torch.allclose(w, _biased(q, k, v, slope, sign=+1.0)[1], atol=1e-5):
            return False, "far keys are favoured: the bias must lower the score with distance (subtract slope * |i - j|)"
        if slope and torch.allclose(w, _biased(q, k, v, slope, absolute=False)[1], atol=1e-5) or \
                slope and torch.allclose(w, _biased(q, k, v, -slope, absolute=False)[1], atol=1e-5):
            return False, "i - j without the absolute value favours one side: the penalty is slope * |i - j|"
        if torch.allclose(w, _biased(q, k, v, slope, scale=False)[1], atol=1e-5):
            return False, "the dot products must still be divided by sqrt(d) (the bias is added after the scaling)"
        if not torch.allclose(w, right_w, atol=1e-5):
            return False, f"with slope {slope} the weights differ from softmax(q k^T / sqrt(d) - slope * |i - j|)"
        return False, "the weights are right but the output is not weights @ v"
    return True, "the scores fall by slope for every position between query and key; with slope 0 it is plain attention"


def _gap(block, x, perm, alpha):
    from attnlib.positional import sinusoidal_encoding

    pe = sinusoidal_encoding(x.shape[2], x.shape[1])
    with torch.no_grad():
        out = block(x + alpha * pe)
        out_perm = block(x[:, perm] + alpha * pe)[:, perm.argsort()]
    return float((out_perm - out).norm() / out.norm())


@checker("6.3")
def equivariance_gap_fn(answer) -> tuple[bool, str]:
    """``answer(block, x (B, T, d), perm (T,), alpha) -> float``: relative L2 gap between the output on the
    original order and the output on shuffled content (positions kept in place), unshuffled."""
    from attnlib.transformer import TransformerBlock

    require(callable_problem(answer, "a function equivariance_gap(block, x, perm, alpha)"))
    torch.manual_seed(0)
    block = TransformerBlock(d_model=16, num_heads=2, d_ff=32, dropout=0.0).eval()
    g = torch.Generator().manual_seed(0)
    x, perm = torch.randn(3, 6, 16, generator=g), torch.tensor([3, 0, 5, 1, 4, 2])
    at0, at1 = float(answer(block, x.clone(), perm, 0.0)), float(answer(block, x.clone(), perm, 1.0))
    right0, right1 = _gap(block, x, perm, 0.0), _gap(block, x, perm, 1.0)
    if at0 > 1e-3:
        return False, (f"at alpha = 0 your gap is {at0:.3f}, but without positions the block is equivariant: "
                       "did you undo the shuffle on the output (index it with perm.argsort())?")
    if at1 < 1e-4:
        return False, ("at alpha = 1 your gap is 0: you moved the positions along with the content; "
                       "shuffle x only and add the table in its original order")
    if abs(at1 - right1) > 1e-3 * max(1.0, right1):
        return False, f"at alpha = 1 the relative gap should be {right1:.4f}, yours is {at1:.4f} (divide by the norm of the unshuffled output)"
    return True, f"gap {right0:.1e} without positions, {right1:.3f} with them"
