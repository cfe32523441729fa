"""Tests of attnlib/attention.py against torch.nn.functional.scaled_dot_product_attention,
plus the properties the notebooks teach (rows sum to 1, masks, no leaks, equivariance)."""
import hypothesis.strategies as st
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

import attnlib
from attnlib import causal_mask, masked_softmax, padding_mask, scaled_dot_product_attention

ATOL = 1e-5
FAST = settings(max_examples=40, deadline=None)


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------- equals PyTorch

@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape",
    [
        ((5, 8), (7, 8), (7, 3)),  # unbatched
        ((2, 5, 8), (2, 7, 8), (2, 7, 8)),  # (B, L, d)
        ((2, 4, 5, 16), (2, 4, 7, 16), (2, 4, 7, 6)),  # (B, h, L, d_k), d_v != d_k
        ((2, 4, 5, 16), (1, 4, 7, 16), (1, 4, 7, 16)),  # batch dims broadcast
    ],
)
def test_equals_torch_without_mask(q_shape, k_shape, v_shape):
    q, k, v = rand(*q_shape, seed=1), rand(*k_shape, seed=2), rand(*v_shape, seed=3)
    out, weights = scaled_dot_product_attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    assert weights.shape == (*out.shape[:-1], k.shape[-2])


@pytest.mark.parametrize(
    "mask_shape",
    [(5, 7), (1, 7), (2, 4, 5, 7), (2, 1, 1, 7), (1, 4, 1, 7), (1, 1, 5, 1)],
)
def test_equals_torch_with_broadcasting_bool_masks(mask_shape):
    q, k, v = rand(2, 4, 5, 16, seed=1), rand(2, 4, 7, 16, seed=2), rand(2, 4, 7, 16, seed=3)
    mask = torch.rand(*mask_shape, generator=torch.Generator().manual_seed(4)) > 0.4
    if mask_shape[-1] > 1:
        mask[..., 0] = True  # every row keeps one key, so PyTorch's output is defined in every version
    else:
        mask[...] = True  # (Lq, 1): a query sees every key or none; here every query sees every key
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    full = mask.expand(2, 4, 5, 7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=full), atol=ATOL, rtol=0)
    assert (weights[~full] == 0).all() and (weights[full] > 0).all()


def test_equals_torch_with_causal_mask():
    q, k, v = rand(3, 2, 6, 8, seed=1), rand(3, 2, 6, 8, seed=2), rand(3, 2, 6, 8, seed=3)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL, rtol=0)


def test_returned_weights_are_softmax_of_scaled_scores():
    q, k, v = rand(2, 5, 8, seed=1), rand(2, 7, 8, seed=2), rand(2, 7, 3, seed=3)
    _, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1), atol=ATOL, rtol=0)


# ---------------------------------------------------------------- properties (Hypothesis)

@st.composite
def attention_inputs(draw):
    """q, k, v of random small shapes plus a random bool mask (B, Lq, Lk) (some rows may be fully masked)."""
    B, Lq, Lk, d, dv = (draw(st.integers(1, n)) for n in (3, 6, 6, 8, 5))
    seed = draw(st.integers(0, 2**16))
    mask = torch.from_numpy(draw(arrays(np.bool_, (B, Lq, Lk))))
    return rand(B, Lq, d, seed=seed), rand(B, Lk, d, seed=seed + 1), rand(B, Lk, dv, seed=seed + 2), mask


@FAST
@given(attention_inputs())
def test_rows_sum_to_one_and_masked_weights_are_exactly_zero(inputs):
    q, k, v, mask = inputs
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert (weights[~mask] == 0).all()
    has_key = mask.any(-1)
    torch.testing.assert_close(weights.sum(-1)[has_key], torch.ones(int(has_key.sum())), atol=ATOL, rtol=0)
    # rows without any allowed key: zero weights, zero output
    assert (weights[~has_key] == 0).all() and (out[~has_key] == 0).all()
    # where a row has a key, the result equals PyTorch's
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[has_key], expected[has_key], atol=ATOL, rtol=0)


@FAST
@given(attention_inputs())
def test_fully_masked_rows_give_no_nan_in_gradients(inputs):
    q, k, v, mask = inputs
    mask[:, 0] = False  # the first query sees nothing
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    (out.sum() + weights.sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, 0] == 0).all()  # the fully masked query does not influence anything
    assert (out[:, 0] == 0).all()


@FAST
@given(st.integers(1, 3), st.integers(1, 7), st.integers(1, 6), st.integers(0, 2**16))
def test_self_attention_is_permutation_equivariant(B, L, d, seed):
    x = rand(B, L, d, seed=seed)
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(seed))
    out, weights = scaled_dot_product_attention(x, x, x)
    xp = x[:, perm]
    out_p, weights_p = scaled_dot_product_attention(xp, xp, xp)
    torch.testing.assert_close(out_p, out[:, perm], atol=ATOL, rtol=0)  # shuffle in = shuffle out
    torch.testing.assert_close(weights_p, weights[:, perm][:, :, perm], atol=ATOL, rtol=0)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**16))
def test_causal_attention_leaks_nothing_from_the_future(L, d, seed):
    x = rand(L, d, seed=seed, dtype=torch.float64)

    def f(x):
        return scaled_dot_product_attention(x, x, x, causal_mask(L))[0]

    jac = torch.autograd.functional.jacobian(f, x)  # (L, d, L, d): d out[i] / d x[j]
    for i in range(L):
        assert (jac[i, :, i + 1:, :] == 0).all(), f"output {i} depends on a later input"
    if L > 1:
        assert (jac[L - 1, :, 0, :] != 0).any()  # the check could fail: the past does matter


def test_gradcheck_float64():
    q, k, v = (rand(3, 3, seed=s, dtype=torch.float64).requires_grad_() for s in (1, 2, 3))
    mask = torch.tensor([[True, False, True], [True, True, False], [False, False, False]])  # last row: no key
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask), (q, k, v))
    q, k, v = (rand(2, 4, 5, seed=s, dtype=torch.float64).requires_grad_() for s in (4, 5, 6))
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v), (q, k, v), fast_mode=True)


def test_dropout_applies_whenever_p_is_positive_and_returns_the_weights_before_it():
    """The function has no training mode: dropout_p > 0 drops weights, even under no_grad."""
    q, k, v = rand(2, 5, 8, seed=1), rand(2, 7, 8, seed=2), rand(2, 7, 3, seed=3)
    out0, w0 = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(0)
    with torch.no_grad():
        out1, w1 = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.testing.assert_close(w1, w0)  # the returned weights: before dropout
    torch.manual_seed(0)
    dropped = F.dropout(w0, p=0.5)  # the same random draw: half the weights zeroed, the rest doubled
    torch.testing.assert_close(out1, dropped @ v)  # would fail if dropout were skipped or applied elsewhere
    assert not torch.allclose(out0, out1)


def test_docstring_says_when_dropout_applies():
    """The old docstring said "training only", but the function has no mode (fixed in issue 14)."""
    doc = scaled_dot_product_attention.__doc__
    assert "training only" not in doc and "whenever ``dropout_p > 0``" in doc


# ---------------------------------------------------------------- the one masked softmax

def test_one_masked_softmax_in_the_package():
    assert attnlib.rnn_attention.masked_softmax is attnlib.attention.masked_softmax is masked_softmax


def test_masked_softmax_values():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, -1.0], [4.0, 4.0, 4.0]])
    mask = torch.tensor([[True, True, False], [False, True, True], [False, False, False]])
    w = masked_softmax(scores, mask)
    e = torch.exp(torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(w[0], torch.cat([e / e.sum(), torch.zeros(1)]))
    e = torch.exp(torch.tensor([5.0, -1.0]))
    torch.testing.assert_close(w[1], torch.cat([torch.zeros(1), e / e.sum()]))
    assert (w[2] == 0).all()  # no allowed entry: zeros, not NaN
    torch.testing.assert_close(masked_softmax(scores, None), torch.softmax(scores, -1))
    torch.testing.assert_close(masked_softmax(scores, mask[:1]), masked_softmax(scores, mask[:1].expand(3, 3)))
    with pytest.raises(ValueError, match=r"mask has shape \(3,\) but it must be the shape of the scores = \(3, 3\)"):
        masked_softmax(scores, mask[0])  # a 1-D mask is not silently read as one row for every row


# ---------------------------------------------------------------- masks

def test_causal_mask_values():
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3), expected)
    assert causal_mask(1).tolist() == [[True]]


def test_padding_mask_values():
    mask = padding_mask([3, 1, 0], 4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]
    assert torch.equal(padding_mask(torch.tensor([2, 4]), 4), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]).bool())


def test_padding_mask_as_key_mask_blocks_padded_keys():
    lengths = [3, 5]
    x = rand(2, 5, 4, seed=1)
    out, weights = scaled_dot_product_attention(x, x, x, padding_mask(lengths, 5)[:, None, :])
    assert (weights[0, :, 3:] == 0).all() and (weights[0, :, :3] > 0).all()
    out_short, _ = scaled_dot_product_attention(x[:1, :3], x[:1, :3], x[:1, :3])
    torch.testing.assert_close(out[0, :3], out_short[0], atol=ATOL, rtol=0)  # padding changes nothing


# ---------------------------------------------------------------- errors name the shapes

def test_error_query_and_key_last_dims_differ():
    with pytest.raises(ValueError, match=r"query has shape \(2, 5, 64\) but key has shape \(2, 7, 32\); the last dimensions must match"):
        scaled_dot_product_attention(torch.zeros(2, 5, 64), torch.zeros(2, 7, 32), torch.zeros(2, 7, 32))


def test_error_key_and_value_lengths_differ():
    with pytest.raises(ValueError, match=r"key has shape \(2, 7, 8\) but value has shape \(2, 6, 8\)"):
        scaled_dot_product_attention(torch.zeros(2, 5, 8), torch.zeros(2, 7, 8), torch.zeros(2, 6, 8))


def test_error_batch_dims_do_not_broadcast():
    with pytest.raises(ValueError, match=r"q \(2, 5, 8\), k \(3, 7, 8\) and v \(3, 7, 8\)"):
        scaled_dot_product_attention(torch.zeros(2, 5, 8), torch.zeros(3, 7, 8), torch.zeros(3, 7, 8))


def test_error_mask_of_the_wrong_size():
    q = torch.zeros(2, 5, 8)
    k = torch.zeros(2, 7, 8)
    with pytest.raises(ValueError, match=r"mask has shape \(5, 5\) but it must be a 2-D \(Lq, Lk\) = \(5, 7\) mask "
                                         r"or a 3-D \(B, Lq, Lk\) = \(2, 5, 7\) mask, with size 1"):
        scaled_dot_product_attention(q, k, k, torch.ones(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask has shape \(3, 5, 7\)"):
        scaled_dot_product_attention(q, k, k, torch.ones(3, 5, 7, dtype=torch.bool))


@pytest.mark.parametrize("mask_shape, hint", [
    ((7,), r"one \(Lk,\) key mask for every query is mask\[None, :\]"),  # 1-D: used to broadcast silently
    ((2, 5, 7), r"a \(B, Lq, Lk\) mask .*is mask\[:, None\]"),  # read as (h, Lq, Lk) before, since B == h
    ((2, 7), r"a \(B, Lk\) padding mask is mask\[:, None, None, :\]"),
])
def test_masks_of_an_ambiguous_rank_are_refused_with_a_hint(mask_shape, hint):
    """Broadcasting adds dimensions on the left, so these masks used to be read in a way nobody meant."""
    q, k = rand(2, 2, 5, 8, seed=1), rand(2, 2, 7, 8, seed=2)  # (B, h, L, d) with B == h
    mask = torch.ones(*mask_shape, dtype=torch.bool)
    shape = ", ".join(map(str, mask_shape)) + ("," if len(mask_shape) == 1 else "")
    with pytest.raises(ValueError, match=rf"mask has shape \({shape}\) but .*\(B, h, Lq, Lk\) = \(2, 2, 5, 7\).*"
                                         rf"add the missing dimensions explicitly: .*{hint}"):
        scaled_dot_product_attention(q, k, k, mask)


def test_padding_mask_of_three_d_scores_gets_its_hint():
    x = rand(3, 5, 4, seed=1)  # B = 3, L = 5: a (B, Lk) mask is not (Lq, Lk) here
    with pytest.raises(ValueError, match=r"a \(B, Lk\) padding mask is mask\[:, None, :\]"):
        scaled_dot_product_attention(x, x, x, padding_mask([5, 3, 1], 5))
    _, w = scaled_dot_product_attention(x, x, x, padding_mask([5, 3, 1], 5)[:, None, :])
    assert (w[1, :, 3:] == 0).all() and (w[2, :, 1:] == 0).all()


def test_error_mask_is_not_bool():
    q = torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool \(True = may attend\), got torch.float32"):
        scaled_dot_product_attention(q, q, q, torch.ones(5, 5))
    with pytest.raises(ValueError, match="mask must be a bool torch.Tensor, got list"):
        scaled_dot_product_attention(q, q, q, [[True]])


def test_error_inputs_not_tensors_or_too_few_dims():
    with pytest.raises(ValueError, match="q must be a torch.Tensor, got list"):
        scaled_dot_product_attention([1.0], torch.zeros(2, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"k must have at least 2 dimensions, but it has shape \(4,\)"):
        scaled_dot_product_attention(torch.zeros(3, 4), torch.zeros(4), torch.zeros(4))


@pytest.mark.parametrize("n", [0, -1, 2.0, "3"])
def test_error_causal_mask_bad_size(n):
    with pytest.raises(ValueError, match="causal_mask needs a positive int size"):
        causal_mask(n)


def test_error_padding_mask_bad_lengths():
    with pytest.raises(ValueError, match=r"every length must be between 0 and max_len=4, got \[2, 5\]"):
        padding_mask([2, 5], 4)
    with pytest.raises(ValueError, match=r"every length must be between 0 and max_len=4, got \[-1\]"):
        padding_mask([-1], 4)
    with pytest.raises(ValueError, match=r"lengths must be 1-D \(B,\), got shape \(1, 2\)"):
        padding_mask([[1, 2]], 4)
    with pytest.raises(ValueError, match="lengths must hold integers, got dtype torch.float32"):
        padding_mask([1.5, 2.0], 4)
