"""Tests of attnlib/rotary.py against an explicit block-diagonal rotation matrix, and the offset property."""
import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnlib.rotary import RotaryEmbedding

FAST = settings(max_examples=40, deadline=None)


def rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rotation_matrix(p: float, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The (head_dim, head_dim) matrix that turns pair (2i, 2i+1) by p * base^(-2i/head_dim), built entry by entry."""
    R = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    for i in range(head_dim // 2):
        angle = p * base ** (-2 * i / head_dim)
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = math.cos(angle), -math.sin(angle)
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return R


@FAST
@given(half=st.integers(1, 16), L=st.integers(1, 20), base=st.sampled_from([10.0, 500.0, 10000.0]),
       start=st.integers(0, 1000), seed=st.integers(0, 999), batch=st.sampled_from([(), (3,), (2, 4)]))
def test_equals_an_explicit_rotation_matrix(half, L, base, start, seed, batch):
    d = 2 * half
    x = rand(*batch, L, d, seed=seed)
    positions = torch.arange(start, start + L)
    out = RotaryEmbedding(d, base=base)(x, positions)
    expected = torch.stack([x[..., t, :] @ rotation_matrix(start + t, d, base).T for t in range(L)], dim=-2)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_default_positions_are_0_to_L_minus_1():
    rope, x = RotaryEmbedding(8), rand(2, 6, 8, seed=1)
    torch.testing.assert_close(rope(x), rope(x, torch.arange(6)))
    torch.testing.assert_close(rope(x)[..., 0, :], x[..., 0, :])  # position 0 is no rotation


@FAST
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-500, 5000), seed=st.integers(0, 999))
def test_the_score_depends_only_on_the_offset(m, n, shift, seed):
    if m + shift < 0 or n + shift < 0:
        shift = -min(m, n)
    rope = RotaryEmbedding(16)
    q, k = rand(1, 16, seed=seed), rand(1, 16, seed=seed + 1)
    score = (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()
    shifted = (rope(q, torch.tensor([m + shift])) * rope(k, torch.tensor([n + shift]))).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=0)


def test_lengths_are_kept_and_float32_works():
    x = rand(3, 50, 32, seed=2).float()
    out = RotaryEmbedding(32)(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_rotary_has_no_parameters_and_nothing_in_the_state_dict():
    rope = RotaryEmbedding(8)
    assert sum(p.numel() for p in rope.parameters()) == 0 and len(rope.state_dict()) == 0


@pytest.mark.parametrize("make, message", [
    (lambda: RotaryEmbedding(7), "head_dim must be a positive even int .* got 7"),
    (lambda: RotaryEmbedding(0), "head_dim must be a positive even int .* got 0"),
    (lambda: RotaryEmbedding(8, base=1.0), "base must be a number > 1, got 1.0"),
    (lambda: RotaryEmbedding(8)(rand(2, 5, 6)), r"x has shape \(2, 5, 6\) but its last dimension must be head_dim=8"),
    (lambda: RotaryEmbedding(8)(rand(2, 5, 8), torch.arange(4)),
     r"positions has shape \(4,\) but x has shape \(2, 5, 8\); expected one position per token, shape \(5,\)"),
    (lambda: RotaryEmbedding(8)(rand(5, 8), torch.arange(5)[None]), r"positions must be 1-D"),
])
def test_bad_inputs_name_expected_and_actual(make, message):
    with pytest.raises(ValueError, match=message):
        make()
