"""Checkers for notebook 06's exercises (wavelengths read off a table, a distance bias inside attention, the alpha at which positions break the symmetry)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


def _table_omega(pe: torch.Tensor, sin_col: int = 0) -> torch.Tensor:
    return torch.atan2(pe[1, sin_col::2].double(), pe[1, 1 - sin_col::2].double())  # (d/2,) angle per position


@checker("6.1")
def wavelengths_from_table(answer) -> tuple[bool, str]:
    """``answer(pe (N, d)) -> (d/2,)``: the wavelengths of a sinusoidal table of unknown base, measured from it."""
    from attnlib.positional import sinusoidal_encoding

    require(callable_problem(answer, "a function wavelengths_from_table(pe)"))
    for d, N, base in ((64, 50, 10000.0), (16, 30, 100.0), (32, 20, 500.0)):
        pe = sinusoidal_encoding(d, N, base=base)  # (N, d)
        got = answer(pe.clone())
        require(tensor_problem(got, (d // 2,), what=f"the wavelengths of a ({N}, {d}) table"))
        got = got.detach().double()
        right = 2 * math.pi * base ** (2 * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
        if torch.allclose(got, right, rtol=1e-3):
            continue
        if torch.allclose(got, right.flip(0), rtol=1e-3):
            return False, "the order is reversed: pair 0 (dimensions 0 and 1) has the shortest wavelength"
        if torch.allclose(got, right / (2 * math.pi), rtol=1e-3):
            return False, "that is one radian's worth of positions: one full turn is an angle of 2π"
        if torch.allclose(got, 2 * math.pi / right, rtol=1e-3) or torch.allclose(got, 1 / right, rtol=1e-3):
            return False, "those are angles per position (frequencies); the wavelength is the number of positions per turn"
        if torch.allclose(got, 2 * math.pi / _table_omega(pe, sin_col=1), rtol=1e-3):
            return False, "sin and cos are swapped: the sin of pair i is in dimension 2i, the cos in 2i + 1"
        if torch.allclose(got[:2], right[:2], rtol=0.05):
            return False, (f"for the ({N}, {d}) table with base {base:g} the short wavelengths are (nearly) right but the long "
                           "ones are not: a pair that turns less than once over the table has no zero crossing, and "
                           "its cos is 1 to float precision; read each pair's angle from both its sin and its cos")
        return False, (f"for the ({N}, {d}) table with base {base:g} the wavelengths differ from the ones the table "
                       "turns with; row p of pair i is (sin p·ω_i, cos p·ω_i)")
    return True, "every pair's wavelength read off the table, whatever its base"


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
        out, w = out.to(q.dtype), w.to(q.dtype)  # a float64 answer is compared in float32, like the reference
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
    return True, "the scores fall by slope per position of distance |i - j| between query and key; with slope 0 it is plain attention"


def _gap(block, x, perm, alpha, shuffle_pe=False, unshuffle=True, relative=True, per_sequence=False):
    from attnlib.positional import sinusoidal_encoding

    pe = sinusoidal_encoding(x.shape[2], x.shape[1])
    with torch.no_grad():
        out = block(x + alpha * pe)
        out_perm = block(x[:, perm] + alpha * (pe[perm] if shuffle_pe else pe))
        out_perm = out_perm[:, perm.argsort()] if unshuffle else out_perm
    if per_sequence:  # a common other reading: the mean over sequences of each sequence's relative gap
        return float(((out_perm - out).flatten(1).norm(dim=1) / out.flatten(1).norm(dim=1)).mean())
    diff = (out_perm - out).norm()  # one norm over the whole (B, T, d) output
    return float(diff / out.norm() if relative else diff)


def _alpha_problem():
    """The block, input (B, T, d) and permutation (T,) that check 6.3 uses (its tests check that the gap grows on [0, 4])."""
    from attnlib.transformer import TransformerBlock

    torch.manual_seed(0)
    block = TransformerBlock(d_model=16, num_heads=2, d_ff=32, dropout=0.0).eval()
    g = torch.Generator().manual_seed(0)
    return block, torch.randn(3, 6, 16, generator=g), torch.tensor([3, 0, 5, 1, 4, 2])


def _crossing(gap, target, lo=0.0, hi=4.0, tol=1e-7):
    """The alpha in [lo, hi] where an increasing gap(alpha) reaches target, by bisection."""
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < target else (lo, mid)
    return hi


@checker("6.3")
def alpha_for_gap(answer) -> tuple[bool, str]:
    """``answer(block, x (B, T, d), perm (T,), target) -> float``: the alpha in [0, 4] at which the relative gap
    between the block's output and its unshuffled output on shuffled content (positions kept in place) reaches target."""
    require(callable_problem(answer, "a function alpha_for_gap(block, x, perm, target)"))
    block, x, perm = _alpha_problem()
    for target in (0.1, 0.5):
        got = answer(block, x.clone(), perm.clone(), target)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, (int, float)):
            return False, f"expected a number (the alpha), got {type(got).__name__}"
        got = float(got)
        right = _crossing(lambda a: _gap(block, x, perm, a), target)
        if abs(got - right) <= 1.1e-3:
            continue
        if abs(got - target) < 1e-6:
            return False, "that is the gap you were aiming for; return the alpha at which the gap reaches it"
        if got <= 1e-3:
            return False, ("you returned alpha = 0, where the gap is 0 (no positions). If your gap is not 0 there, undo "
                           "the shuffle on the output (index it with perm.argsort()); if it is, check which half "
                           "your search keeps: the gap grows with alpha")
        if got >= 4.0 - 1e-3:
            return False, ("your search ended at alpha = 4. Either your gap never reaches the target (if you moved the "
                           "positions along with the content, shuffle x only and add the table in its original "
                           "order), or your search keeps the wrong half: the gap grows with alpha")
        if abs(got - _crossing(lambda a: _gap(block, x, perm, a, relative=False), target)) <= 1.1e-3:
            return False, "the gap is relative: divide by the norm of the unshuffled output"
        if abs(got - _crossing(lambda a: _gap(block, x, perm, a, per_sequence=True), target)) <= 1.1e-3:
            return False, ("your gap looks like a mean of one relative gap per sequence; the gap here is one norm over the "
                           "whole (B, T, d) difference divided by the norm of the whole unshuffled output, as symmetry_gap "
                           "in section 3")
        return False, (f"for target {target}: at your alpha = {got:.4f} the relative gap is "
                       f"{_gap(block, x, perm, got):.4f}; it should reach {target} there, to within alpha ± 0.001")
    return True, "the alpha at which shuffling the content changes the output by the target, found by bisection"
