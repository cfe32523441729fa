"""Checkers for notebook 06's exercises (wavelengths, reading a position back, shuffled content)."""
from __future__ import annotations

import math

import torch

from . import checker
from .nb00 import callable_problem, tensor_problem


@checker("6.1")
def wavelengths_64(answer) -> tuple[bool, str]:
    """The 32 wavelengths (in positions) of the sinusoidal table with d_model = 64, pair 0 first."""
    problem = tensor_problem(answer, (32,), what="the wavelengths")
    if problem:
        return False, problem
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


@checker("6.2")
def decode_position_fn(answer) -> tuple[bool, str]:
    """``answer(vec (d,)) -> int``: the position p whose row of ``sinusoidal_encoding(64, 1000)`` is nearest to vec."""
    from attnlib.positional import sinusoidal_encoding

    problem = callable_problem(answer, "a function where_am_i(vec)")
    if problem:
        return False, problem
    table = sinusoidal_encoding(64, 1000)
    g = torch.Generator().manual_seed(0)
    for p in (0, 1, 17, 500, 999):
        for noisy in (False, True):
            vec = table[p] + (0.01 * torch.randn(64, generator=g) if noisy else 0.0)
            got = answer(vec.clone())
            try:
                got = int(got)
            except (TypeError, ValueError, RuntimeError):
                return False, f"return one position (an int), got {type(got).__name__} of shape {tuple(getattr(got, 'shape', ()))}"
            if got == p:
                continue
            if noisy and answer(table[p].clone()) == p:
                return False, (f"position {p}: an exact row is found, but a slightly perturbed one is not; "
                               "pick the nearest row (largest dot product), not an exact match")
            if got == p + 1 or got == p - 1:
                return False, f"position {p}: you returned {got}, one off; row p of the table belongs to position p (counting from 0)"
            return False, f"position {p}: you returned {got}; the row of position p has the largest dot product with PE[p]"
    return True, "the nearest row of the table gives the position back, also with a little noise"


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

    problem = callable_problem(answer, "a function equivariance_gap(block, x, perm, alpha)")
    if problem:
        return False, problem
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
