"""Tests of attnlib/layers.py: FeedForward is position-wise, RMSNorm equals torch.nn.RMSNorm, SwiGLU equals its
formula written out, and bad sizes are refused by name."""
import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from torch import nn

from attnlib import FeedForward, RMSNorm, SwiGLU


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_feed_forward_is_position_wise():
    torch.manual_seed(0)
    ff = FeedForward(32, 64)
    x = rand(2, 5, 32)
    torch.testing.assert_close(ff(x)[:, 3], ff(x[:, 3:4])[:, 0])  # each position on its own
    assert sum(p.numel() for p in ff.parameters()) == 2 * 32 * 64 + 64 + 32


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 64), shape=st.sampled_from([(3,), (2, 5), (2, 3, 4)]), eps=st.sampled_from([1e-6, 1e-5, 0.1]),
       seed=st.integers(0, 999))
def test_rmsnorm_equals_torch(d, shape, eps, seed):
    ours, theirs = RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
    with torch.no_grad():
        ours.weight.copy_(rand(d, seed=seed + 1))
        theirs.weight.copy_(ours.weight)
    x = rand(*shape, d, seed=seed) * 3
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


def test_rmsnorm_keeps_the_direction_and_sets_the_root_mean_square():
    x = rand(4, 16, seed=2) * 7 + 1
    y = RMSNorm(16)(x)  # weight 1
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-4, rtol=0)
    torch.testing.assert_close(F.cosine_similarity(x, y, dim=-1), torch.ones(4), atol=1e-6, rtol=0)
    assert not torch.allclose(y.mean(-1), torch.zeros(4))  # unlike LayerNorm, the mean is not removed


def test_rmsnorm_of_half_precision_is_computed_in_float32():
    x = rand(3, 8, seed=3).to(torch.bfloat16) * 100
    y = RMSNorm(8)(x)
    assert y.dtype == torch.float32  # the float32 weight times the bfloat16 result
    torch.testing.assert_close(y, RMSNorm(8)(x.float()).to(torch.bfloat16).float())


def test_swiglu_equals_its_formula_and_counts_three_matrices():
    torch.manual_seed(0)
    ff = SwiGLU(12, 20)
    x = rand(2, 5, 12)
    z = x @ ff.gate.weight.T
    expected = ((z * torch.sigmoid(z)) * (x @ ff.up.weight.T)) @ ff.down.weight.T
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=0)
    assert sum(p.numel() for p in ff.parameters()) == 3 * 12 * 20
    assert sum(p.numel() for p in SwiGLU(12, 20, bias=True).parameters()) == 3 * 12 * 20 + 2 * 20 + 12


@pytest.mark.parametrize("make, says", [
    (lambda: FeedForward(8, 16, activation="tanh"), "activation must be one of ['gelu', 'relu'], got 'tanh'"),
    (lambda: FeedForward(0, 16), "d_model must be a positive int, got 0"),
    (lambda: SwiGLU(8, 0), "d_ff must be a positive int, got 0"),
    (lambda: RMSNorm(8, eps=0), "eps must be > 0, got 0"),
    (lambda: RMSNorm(8)(torch.zeros(2, 6)), "x has shape (2, 6) but its last dimension must be d_model=8"),
])
def test_bad_sizes_are_refused_by_name(make, says):
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        make()
