"""Tests of attnlib/tiled.py: online softmax against torch.softmax, tiled attention against
F.scaled_dot_product_attention, over shapes, masks and block sizes; and the sliding-window mask."""
import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnlib.attention import causal_mask, scaled_dot_product_attention, sliding_window_mask
from attnlib.tiled import online_softmax, online_softmax_stats, tiled_attention

FAST = settings(max_examples=40, deadline=None)


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------- online softmax

@FAST
@given(rows=st.integers(1, 4), n=st.integers(1, 50), block=st.integers(1, 20), seed=st.integers(0, 999),
       holes=st.floats(0.0, 0.8))
def test_online_softmax_equals_torch_softmax_with_minus_inf_entries(rows, n, block, seed, holes):
    x = rand(rows, n, seed=seed) * 5
    drop = torch.rand(rows, n, generator=torch.Generator().manual_seed(seed + 1)) < holes
    drop[:, 0] = False  # every row keeps one finite entry, so torch.softmax is defined
    x = x.masked_fill(drop, float("-inf"))
    torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, dim=-1), atol=1e-6, rtol=0)


def test_online_softmax_stats_are_the_max_and_the_sum():
    x = rand(3, 37, seed=4) * 10
    m, l = online_softmax_stats(x, block_size=5)
    torch.testing.assert_close(m, x.amax(-1, keepdim=True))
    torch.testing.assert_close(l, torch.exp(x - m).sum(-1, keepdim=True))


def test_online_softmax_of_an_all_minus_inf_row_is_zeros_not_nan():
    x = rand(2, 9, seed=5)
    x[1] = float("-inf")
    out = online_softmax(x, block_size=4)
    assert torch.equal(out[1], torch.zeros(9))
    torch.testing.assert_close(out[0], torch.softmax(x[0], dim=-1), atol=1e-6, rtol=0)


def test_online_softmax_survives_a_later_block_with_a_much_larger_maximum():
    x = torch.tensor([[0.0, 1.0, 2.0, 500.0, 3.0]])  # exp(500) overflows float32 without the running max
    torch.testing.assert_close(online_softmax(x, block_size=2), torch.softmax(x, dim=-1))


# ---------------------------------------------------------------- tiled attention == SDPA

@FAST
@given(lq=st.integers(1, 70), lk=st.integers(1, 70), d=st.integers(1, 12), dv=st.integers(1, 12),
       block=st.integers(1, 33), batch=st.sampled_from([(), (2,), (2, 3)]), seed=st.integers(0, 999))
def test_tiled_equals_sdpa_without_mask(lq, lk, d, dv, block, batch, seed):
    q, k, v = rand(*batch, lq, d, seed=seed), rand(*batch, lk, d, seed=seed + 1), rand(*batch, lk, dv, seed=seed + 2)
    out = tiled_attention(q, k, v, block_size=block)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=0)


@FAST
@given(lq=st.integers(1, 60), lk=st.integers(1, 60), block=st.integers(1, 25), seed=st.integers(0, 999))
def test_tiled_equals_sdpa_causal(lq, lk, block, seed):
    q, k, v = rand(2, 2, lq, 8, seed=seed), rand(2, 2, lk, 8, seed=seed + 1), rand(2, 2, lk, 8, seed=seed + 2)
    out = tiled_attention(q, k, v, causal=True, block_size=block)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


@FAST
@given(lq=st.integers(1, 40), lk=st.integers(1, 40), block=st.integers(1, 17), seed=st.integers(0, 999),
       p=st.floats(0.2, 0.9), shape=st.sampled_from(["full", "2d", "keys"]), causal=st.booleans())
def test_tiled_equals_sdpa_with_a_bool_mask(lq, lk, block, seed, p, shape, causal):
    q, k, v = rand(2, 3, lq, 8, seed=seed), rand(2, 3, lk, 8, seed=seed + 1), rand(2, 3, lk, 5, seed=seed + 2)
    g = torch.Generator().manual_seed(seed + 3)
    mask_shape = {"full": (2, 3, lq, lk), "2d": (lq, lk), "keys": (2, 1, 1, lk)}[shape]
    mask = torch.rand(mask_shape, generator=g) < p
    out = tiled_attention(q, k, v, mask=mask, causal=causal, block_size=block)
    full = mask & causal_mask(max(lq, lk))[:lq, :lk] if causal else mask
    expected, _ = scaled_dot_product_attention(q, k, v, full)  # zeros for rows with no key, like tiled
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    rows_ok = full.expand(2, 3, lq, lk).any(-1)
    if rows_ok.any():  # where SDPA is defined (at least one key), compare with PyTorch directly too
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=full)
        torch.testing.assert_close(out[rows_ok], sdpa[rows_ok], atol=1e-5, rtol=0)
    assert torch.equal(out[~rows_ok], torch.zeros_like(out[~rows_ok]))


def test_tiled_gradients_match_sdpa():
    q, k, v = (rand(1, 2, 23, 8, seed=s, dtype=torch.float64).requires_grad_() for s in (1, 2, 3))
    tiled_attention(q, k, v, causal=True, block_size=5).square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum().backward()
    for mine, theirs in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(mine, theirs)


def test_block_size_larger_than_the_input_is_one_tile():
    q, k, v = rand(4, 6, seed=1), rand(9, 6, seed=2), rand(9, 6, seed=3)
    torch.testing.assert_close(tiled_attention(q, k, v, block_size=1000), F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("call, message", [
    (lambda: tiled_attention(rand(2, 5, 8), rand(2, 7, 4), rand(2, 7, 4)),
     r"query has shape \(2, 5, 8\) but key has shape \(2, 7, 4\); the last dimensions must match"),
    (lambda: tiled_attention(rand(2, 5, 8), rand(2, 7, 8), rand(2, 6, 8)),
     r"key has shape \(2, 7, 8\) but value has shape \(2, 6, 8\)"),
    (lambda: tiled_attention(rand(2, 5, 8), rand(2, 5, 8), rand(2, 5, 8), block_size=0),
     r"block_size must be a positive int, got 0"),
    (lambda: tiled_attention(rand(2, 5, 8), rand(2, 5, 8), rand(2, 5, 8), mask=torch.ones(5, 5)),
     r"mask must have dtype torch.bool .* got torch.float32"),
    (lambda: tiled_attention(rand(2, 5, 8), rand(2, 5, 8), rand(2, 5, 8), mask=torch.ones(4, 5, dtype=torch.bool)),
     r"mask has shape \(4, 5\) but it must be a 2-D \(Lq, Lk\) = \(5, 5\) mask or a 3-D \(n0, Lq, Lk\) = \(2, 5, 5\) mask"),
    (lambda: tiled_attention(rand(3, 5, 8), rand(2, 5, 8), rand(2, 5, 8)),
     r"leading \(batch\) dimensions of q \(3, 5, 8\), k \(2, 5, 8\) and v \(2, 5, 8\)"),
    (lambda: online_softmax(rand(3, 4), block_size=-2), r"block_size must be a positive int, got -2"),
])
def test_bad_inputs_name_expected_and_actual(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---------------------------------------------------------------- sliding window

@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), window=st.integers(1, 50))
def test_sliding_window_mask_equals_an_explicit_loop(n, window):
    expected = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            expected[i, j] = 0 <= i - j < window
    mask = sliding_window_mask(n, window)
    assert mask.dtype == torch.bool and torch.equal(mask, expected)


def test_a_window_as_long_as_the_input_is_the_causal_mask():
    assert torch.equal(sliding_window_mask(9, 9), causal_mask(9))
    assert torch.equal(sliding_window_mask(9, 1), torch.eye(9, dtype=torch.bool))


@pytest.mark.parametrize("n, window, message", [
    (0, 3, "positive int n, got 0"), (5, 0, "positive int window, got 0"), (5, 2.5, "positive int window, got 2.5"),
])
def test_sliding_window_bad_inputs(n, window, message):
    with pytest.raises(ValueError, match=message):
        sliding_window_mask(n, window)
