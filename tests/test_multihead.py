"""Tests of attnlib/multihead.py against torch.nn.MultiheadAttention (batch_first=True) and
F.scaled_dot_product_attention (grouped-query attention, causal, windows), and of the KV cache.

Mask polarity: attnlib's bool masks say True = may attend; nn.MultiheadAttention's bool
masks say True = blocked. So every comparison passes ``~mask`` to PyTorch.
"""
import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from torch import nn

from attnlib import (KVCache, MultiHeadAttention, RotaryEmbedding, causal_mask, padding_mask,
                     scaled_dot_product_attention, sliding_window_mask)
from attnlib.attention import fused_attention

ATOL = 1e-5


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def pair(d_model, num_heads, seed=0, bias=True):
    """An nn.MultiheadAttention and our module holding the same weights, both in eval mode."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, num_heads, batch_first=True, bias=bias).eval()
    with torch.no_grad():  # PyTorch initialises the biases to 0; make them matter
        for p in theirs.parameters():
            if p.dim() == 1:
                p.normal_()
    ours = MultiHeadAttention(d_model, num_heads, bias=bias).copy_from_torch(theirs).eval()
    return ours, theirs


def torch_mha(theirs, q, k, v, mask=None):
    """Run nn.MultiheadAttention with our (B, h, Lq, Lk) True=attend mask; per-head weights."""
    attn_mask = None
    if mask is not None:
        B, Lq, Lk, h = q.shape[0], q.shape[1], k.shape[1], theirs.num_heads
        attn_mask = ~mask.expand(B, h, Lq, Lk).reshape(B * h, Lq, Lk)  # opposite polarity!
    return theirs(q, k, v, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


# ---------------------------------------------------------------- equals PyTorch

@pytest.mark.parametrize("bias", [True, False])
def test_same_output_and_per_head_weights_as_torch(bias):
    ours, theirs = pair(32, 4, bias=bias)
    q, kv = rand(3, 5, 32, seed=1), rand(3, 7, 32, seed=2)
    out, weights = ours(q, kv, kv)
    expected, expected_w = torch_mha(theirs, q, kv, kv)
    assert out.shape == (3, 5, 32) and weights.shape == (3, 4, 5, 7)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)
    # nn's default, head-averaged weights, are the mean over our heads
    _, averaged = theirs(q, kv, kv)
    torch.testing.assert_close(weights.mean(1), averaged, atol=ATOL, rtol=0)


def test_same_as_torch_with_causal_mask_and_polarity_matters():
    ours, theirs = pair(16, 2, seed=1)
    x = rand(2, 6, 16, seed=3)
    out, weights = ours(x, x, x, mask=causal_mask(6))
    expected, expected_w = theirs(x, x, x, attn_mask=~causal_mask(6), average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)
    assert (weights.triu(1) == 0).all()
    # the classic mistake: our mask passed to PyTorch unchanged makes query 0 see only the future
    wrong, wrong_w = theirs(x, x, x, attn_mask=causal_mask(6), average_attn_weights=False)
    assert (wrong_w[:, :, 0, 0] == 0).all() and (wrong_w[:, :, 0, 1:] > 0).all()
    assert not torch.allclose(wrong[:, 0], expected[:, 0], atol=1e-3)


def test_same_as_torch_with_padding_and_per_head_masks():
    ours, theirs = pair(24, 3, seed=2)
    q, kv = rand(2, 4, 24, seed=4), rand(2, 6, 24, seed=5)
    keep = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)  # (B, Lk) padding
    out, weights = ours(q, kv, kv, mask=keep[:, None, None, :])
    expected, expected_w = theirs(q, kv, kv, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)

    per_head = torch.rand(2, 3, 4, 6, generator=torch.Generator().manual_seed(6)) > 0.5
    per_head[..., 0] = True
    out, weights = ours(q, kv, kv, mask=per_head)
    expected, expected_w = torch_mha(theirs, q, kv, kv, per_head)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 3), st.integers(1, 6), st.integers(1, 6), st.sampled_from([1, 2, 4]),
    st.integers(1, 4), st.booleans(), st.integers(0, 2**16),
)
def test_hypothesis_equals_torch(B, Lq, Lk, heads, d_k, use_mask, seed):
    ours, theirs = pair(heads * d_k, heads, seed=seed % 100)
    q, kv = rand(B, Lq, heads * d_k, seed=seed), rand(B, Lk, heads * d_k, seed=seed + 1)
    mask = None
    if use_mask:
        mask = torch.rand(B, heads, Lq, Lk, generator=torch.Generator().manual_seed(seed)) > 0.5
        mask[..., seed % Lk] = True  # nn.MultiheadAttention is NaN on rows without keys
    out, weights = ours(q, kv, kv, mask=mask)
    expected, expected_w = torch_mha(theirs, q, kv, kv, mask)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)
    fast, none = ours(q, kv, kv, mask=mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, out, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- the fast path

@pytest.mark.parametrize("mask_kind", ["none", "causal", "padding", "fully_masked_rows"])
def test_need_weights_false_equals_need_weights_true(mask_kind):
    ours, _ = pair(32, 4, seed=3)
    x = rand(2, 5, 32, seed=7)
    mask = {
        "none": None,
        "causal": causal_mask(5),
        "padding": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :],
        "fully_masked_rows": torch.rand(2, 4, 5, 5, generator=torch.Generator().manual_seed(8)) > 0.5,
    }[mask_kind]
    if mask_kind == "fully_masked_rows":
        mask[0, 1, 2] = False  # batch 0, head 1, query 2 sees nothing
        mask[1, :, 4] = False  # batch 1, query 4 sees nothing in any head
    out, weights = ours(x, x, x, mask=mask)
    fast, none = ours(x, x, x, mask=mask, need_weights=False)
    assert none is None
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, out, atol=ATOL, rtol=0)
    if mask_kind == "fully_masked_rows":
        # a query that sees nothing in any head outputs only the output projection's bias
        torch.testing.assert_close(out[1, 4], ours.w_o.bias.detach(), atol=ATOL, rtol=0)
        assert (weights[0, 1, 2] == 0).all()


def test_fast_path_gradients_equal_slow_path():
    ours, _ = pair(16, 2, seed=4)
    x1 = rand(2, 4, 16, seed=9).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    ours(x1, x1, x1, mask=causal_mask(4))[0].square().sum().backward()
    ours(x2, x2, x2, mask=causal_mask(4), need_weights=False)[0].square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=ATOL, rtol=0)


@pytest.mark.parametrize("mask_shape", [None, (5, 6), (2, 1, 1, 6), (2, 3, 5, 6)])
def test_fused_attention_equals_the_teaching_version(mask_shape):
    q, k, v = rand(2, 3, 5, 8, seed=1), rand(2, 3, 6, 8, seed=2), rand(2, 3, 6, 4, seed=3)
    mask = None
    if mask_shape is not None:
        mask = torch.rand(*mask_shape, generator=torch.Generator().manual_seed(4)) > 0.5
        mask[..., 0, :] = False  # the first query sees nothing
    expected, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(fused_attention(q, k, v, mask), expected, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- structure

def test_split_and_merge_heads():
    mha = MultiHeadAttention(12, 3)
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[1, 2, 3], x[1, 3, 8:12])  # head i owns features i*d_k .. (i+1)*d_k
    assert torch.equal(mha.merge_heads(heads), x)


def test_parameter_count_and_repr():
    mha = MultiHeadAttention(64, 8)
    assert sum(p.numel() for p in mha.parameters()) == 4 * 64 * 64 + 4 * 64
    assert sum(p.numel() for p in MultiHeadAttention(64, 8, bias=False).parameters()) == 4 * 64 * 64
    assert sum(p.numel() for p in mha.parameters()) == sum(
        p.numel() for p in nn.MultiheadAttention(64, 8, batch_first=True).parameters()
    )
    assert "d_model=64, num_heads=8, d_k=8" in repr(mha)


def test_self_attention_is_permutation_equivariant():
    ours, _ = pair(16, 4, seed=5)
    x = rand(2, 7, 16, seed=10)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    out, _ = ours(x, x, x)
    out_p, _ = ours(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm], atol=ATOL, rtol=0)


def test_gradcheck_float64():
    torch.manual_seed(0)
    mha = MultiHeadAttention(4, 2).double()
    q, kv = rand(1, 3, 4, seed=1, dtype=torch.float64), rand(1, 2, 4, seed=2, dtype=torch.float64)
    q.requires_grad_(), kv.requires_grad_()
    mask = torch.tensor([[True, False], [True, True], [False, False]])
    assert torch.autograd.gradcheck(lambda q, kv: mha(q, kv, kv, mask=mask)[0], (q, kv))
    assert torch.autograd.gradcheck(lambda q, kv: mha(q, kv, kv, mask=mask, need_weights=False)[0], (q, kv))


def test_dropout_only_in_training():
    """Compared with a twin that has the same weights and no dropout."""
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    twin = MultiHeadAttention(16, 2, dropout=0.0)
    twin.load_state_dict(mha.state_dict())
    x = rand(2, 5, 16, seed=11)
    mha.eval()
    expected, expected_w = twin.eval()(x, x, x)
    out, weights = mha(x, x, x)
    torch.testing.assert_close(out, expected)  # eval: no weight is dropped
    mha.train()
    torch.manual_seed(0)
    out, weights = mha(x, x, x)
    assert not torch.allclose(out, expected, atol=1e-3)  # training: some are
    torch.testing.assert_close(weights, expected_w)  # the returned weights are the ones before dropout


# ---------------------------------------------------------------- key_padding_mask

@pytest.mark.parametrize("need_weights", [True, False])
def test_key_padding_mask_equals_torch_when_batch_equals_length(need_weights):
    """With B == Lq a (B, Lk) padding mask passed as `mask` is read as (Lq, Lk): key_padding_mask is the fix."""
    ours, theirs = pair(24, 3, seed=2)
    x = rand(4, 4, 24, seed=4)  # B = L = 4
    keep = padding_mask([4, 2, 3, 1], 4)  # (B, Lk)
    out, weights = ours(x, x, x, key_padding_mask=keep, need_weights=need_weights)
    expected, expected_w = theirs(x, x, x, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    if need_weights:
        torch.testing.assert_close(weights, expected_w, atol=ATOL, rtol=0)
    misread, _ = ours(x, x, x, mask=keep)  # accepted (a 2-D mask is (Lq, Lk)) but means something else
    assert not torch.allclose(misread, expected, atol=1e-3)


@pytest.mark.parametrize("need_weights", [True, False])
def test_key_padding_mask_combines_with_a_causal_mask(need_weights):
    ours, theirs = pair(16, 2, seed=3)
    x = rand(3, 5, 16, seed=5)
    keep = padding_mask([5, 3, 2], 5)
    out, weights = ours(x, x, x, mask=causal_mask(5), key_padding_mask=keep, need_weights=need_weights)
    expected, expected_w = theirs(x, x, x, attn_mask=~causal_mask(5), key_padding_mask=~keep,
                                  average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)  # every query keeps key 0, so no row is NaN
    same, _ = ours(x, x, x, mask=causal_mask(5) & keep[:, None, None, :], need_weights=need_weights)
    torch.testing.assert_close(out, same, atol=ATOL, rtol=0)  # the same as one combined 4-D mask
    if need_weights:
        assert (weights.triu(1) == 0).all() and (weights[1, :, :, 3:] == 0).all()


def test_key_padding_mask_errors():
    mha, x = MultiHeadAttention(8, 2), torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(2, 1, 1, 5\) but it must be \(B, Lk\) = \(2, 5\)"):
        mha(x, x, x, key_padding_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_padding_mask must have dtype torch.bool"):
        mha(x, x, x, key_padding_mask=torch.ones(2, 5))


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("d_model, heads", [(10, 3), (64, 5), (8, 0)])
def test_d_model_not_divisible(d_model, heads):
    with pytest.raises(ValueError, match=f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={heads}"):
        MultiHeadAttention(d_model, heads)


def test_shape_errors_name_the_shapes():
    mha = MultiHeadAttention(8, 2)
    x = torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=r"query must be 3-D, but it has shape \(5, 8\) \(2-D\)"):
        mha(torch.zeros(5, 8), x, x)
    with pytest.raises(ValueError, match=r"key has shape \(2, 5, 6\) but its last dimension must be d_model=8"):
        mha(x, torch.zeros(2, 5, 6), x)
    with pytest.raises(ValueError, match=r"key has shape \(2, 5, 8\) but value has shape \(2, 4, 8\)"):
        mha(x, x, torch.zeros(2, 4, 8))
    with pytest.raises(ValueError, match=r"query has shape \(3, 5, 8\) but key has shape \(2, 5, 8\); the batch sizes must match"):
        mha(torch.zeros(3, 5, 8), x, x)
    with pytest.raises(ValueError, match=r"mask has shape \(2, 5\) but it must be a 2-D \(Lq, Lk\) = \(5, 5\) mask or a "
                                         r"4-D \(B, h, Lq, Lk\) = \(2, 2, 5, 5\) mask.*a \(B, Lk\) padding mask is "
                                         r"mask\[:, None, None, :\] \(or pass it as key_padding_mask\)"):
        mha(x, x, x, mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must have dtype torch.bool"):
        mha(x, x, x, mask=torch.ones(5, 5, dtype=torch.int64))


@pytest.mark.parametrize("shape", [(2, 5, 5), (5,), (2, 1, 5)])
def test_masks_of_an_ambiguous_rank_are_refused(shape):
    """B == h == 2: a (B, Lq, Lk) mask used to be read as (h, Lq, Lk), and a (Lk,) mask broadcast silently."""
    mha, x = MultiHeadAttention(8, 2), torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=rf"mask has shape .* but a {len(shape)}-D mask is ambiguous here; .*"
                                         r"add the missing dimensions explicitly"):
        mha(x, x, x, mask=torch.ones(*shape, dtype=torch.bool))


def test_copy_from_torch_errors():
    with pytest.raises(ValueError, match="embed_dim=16, num_heads=4; expected d_model=8, num_heads=2"):
        MultiHeadAttention(8, 2).copy_from_torch(nn.MultiheadAttention(16, 4, batch_first=True))
    with pytest.raises(ValueError, match="separate kdim/vdim"):
        MultiHeadAttention(8, 2).copy_from_torch(nn.MultiheadAttention(8, 2, kdim=4, vdim=4, batch_first=True))


@pytest.mark.parametrize("ours_bias, theirs_bias", [(True, False), (False, True)])
def test_copy_from_torch_refuses_a_bias_mismatch(ours_bias, theirs_bias):
    """Copying would otherwise succeed silently and give a different output."""
    with pytest.raises(ValueError, match=f"bias={theirs_bias} but this module has bias={ours_bias}"):
        MultiHeadAttention(8, 2, bias=ours_bias).copy_from_torch(nn.MultiheadAttention(8, 2, bias=theirs_bias, batch_first=True))


def test_copy_from_torch_refuses_extra_key_value_biases():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention(8, 2).copy_from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention(8, 2).copy_from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True, batch_first=True))


def test_copy_from_a_sequence_first_module():
    """The weights do not depend on batch_first; the probe after copying runs theirs in its own layout."""
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(16, 4).eval()  # batch_first=False: (L, B, d)
    ours = MultiHeadAttention(16, 4).copy_from_torch(theirs).eval()
    x = rand(2, 6, 16, seed=1)
    torch.testing.assert_close(ours(x, x, x)[0], theirs(*(x.transpose(0, 1),) * 3)[0].transpose(0, 1), atol=ATOL, rtol=0)


def test_copy_from_torch_checks_behaviour_and_undoes_a_bad_copy():
    """A module with the same weights that computes something else: the probe catches it, nothing is copied."""

    class Louder(nn.MultiheadAttention):
        def forward(self, *args, **kwargs):
            out, w = super().forward(*args, **kwargs)
            return 2 * out, w

    torch.manual_seed(0)
    ours = MultiHeadAttention(8, 2)
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with pytest.raises(ValueError, match="give different outputs on a probe input.*nothing was copied"):
        ours.copy_from_torch(Louder(8, 2, batch_first=True))
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())
    assert ours.training  # its mode is restored too


def test_copy_from_torch_leaves_the_global_random_state_alone():
    """Notebooks seed, copy, then draw: the probe input must come from a generator of its own."""
    theirs, ours = nn.MultiheadAttention(8, 2, batch_first=True), MultiHeadAttention(8, 2)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    ours.copy_from_torch(theirs)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- grouped-query attention (num_kv_heads)

FAST = settings(max_examples=30, deadline=None)


def heads_and_groups():
    return st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3), (6, 2), (8, 2)])


@FAST
@given(hg=heads_and_groups(), d_k=st.integers(1, 6), lq=st.integers(1, 9), lk=st.integers(1, 9),
       bias=st.booleans(), seed=st.integers(0, 999), need_weights=st.booleans(), masked=st.booleans())
def test_grouped_equals_multihead_with_repeated_kv_weights(hg, d_k, lq, lk, bias, seed, need_weights, masked):
    h, g = hg
    d = h * d_k
    torch.manual_seed(seed)
    gqa = MultiHeadAttention(d, h, bias=bias, num_kv_heads=g).eval()
    mha = MultiHeadAttention(d, h, bias=bias).eval()
    with torch.no_grad():  # MHA head i gets the K/V rows of kv head i // (h // g): the reference grouping
        for name in ("w_k", "w_v"):
            w = getattr(gqa, name).weight.view(g, d_k, d)
            getattr(mha, name).weight.copy_(w.repeat_interleave(h // g, dim=0).reshape(d, d))
            if bias:
                b = getattr(gqa, name).bias.view(g, d_k)
                getattr(mha, name).bias.copy_(b.repeat_interleave(h // g, dim=0).reshape(d))
        for name in ("w_q", "w_o"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
    x, y = rand(2, lq, d, seed=seed), rand(2, lk, d, seed=seed + 1)
    mask = (rand(2, h, lq, lk, seed=seed + 2) > 0) if masked else None
    out, weights = gqa(x, y, y, mask=mask, need_weights=need_weights)
    ref, ref_weights = mha(x, y, y, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, atol=1e-6, rtol=0)
    else:
        assert weights is None


def test_with_as_many_kv_heads_as_heads_it_is_multihead_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).eval()
    same = MultiHeadAttention(12, 3, num_kv_heads=3).eval()
    same.load_state_dict(mha.state_dict())  # strict: same names, same shapes
    x = rand(3, 7, 12)
    assert torch.equal(same(x, x, x)[0], mha(x, x, x)[0])
    assert sum(p.numel() for p in MultiHeadAttention(12, 3, num_kv_heads=1).parameters()) == \
        4 * 12 * 12 + 4 * 12 - 2 * (12 * 8 + 8)  # w_k and w_v shrink from 12 to 4 outputs each


@FAST
@given(hg=heads_and_groups(), d_k=st.integers(1, 8), L=st.integers(1, 12), seed=st.integers(0, 999))
def test_grouping_and_causal_equal_pytorch_enable_gqa(hg, d_k, L, seed):
    h, g = hg
    torch.manual_seed(seed)
    gqa = MultiHeadAttention(h * d_k, h, num_kv_heads=g).eval()
    x = rand(2, L, h * d_k, seed=seed)
    q = gqa.split_heads(gqa.w_q(x))  # (B, h, L, d_k)
    k, v = gqa.split_heads(gqa.w_k(x), g), gqa.split_heads(gqa.w_v(x), g)  # (B, g, L, d_k)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, h, L, d_k)
    expected = gqa.w_o(heads.transpose(1, 2).reshape(2, L, h * d_k))
    for kwargs in ({"mask": causal_mask(L)}, {"causal": True}, {"causal": True, "need_weights": False}):
        torch.testing.assert_close(gqa(x, x, x, **kwargs)[0], expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- causal, window, rotary

@pytest.mark.parametrize("window", [1, 3, 20])
@pytest.mark.parametrize("need_weights", [True, False])
def test_window_equals_the_sliding_window_mask(window, need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, num_kv_heads=2, window=window).eval()
    plain = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    plain.load_state_dict(m.state_dict())
    x = rand(2, 9, 16)
    out, w = m(x, x, x, need_weights=need_weights)
    ref, ref_w = plain(x, x, x, mask=sliding_window_mask(9, window), need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=0)
    if need_weights:
        assert torch.equal(w, ref_w) and (w[..., ~sliding_window_mask(9, window)] == 0).all()


def test_rotary_makes_self_attention_see_order():
    torch.manual_seed(0)
    plain = MultiHeadAttention(8, 2, num_kv_heads=1).eval()
    rope = MultiHeadAttention(8, 2, num_kv_heads=1, rotary=RotaryEmbedding(4)).eval()
    rope.load_state_dict(plain.state_dict())  # a rotary embedding has no parameters
    x, perm = rand(1, 6, 8, seed=3), torch.tensor([3, 1, 5, 0, 2, 4])
    for module, equivariant in ((plain, True), (rope, False)):
        out, out_perm = module(x, x, x)[0], module(x[:, perm], x[:, perm], x[:, perm])[0]
        assert torch.allclose(out[:, perm], out_perm, atol=1e-6) == equivariant


def test_rotary_scores_depend_on_the_offset_only():
    """Shift every token by the same number of positions (through a cache of that length): same weights."""
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4)).eval()
    x = rand(1, 5, 8, seed=4)
    _, w0 = m(x, x, x, causal=True)
    cache = KVCache(40)
    m(rand(1, 30, 8, seed=5), rand(1, 30, 8, seed=5), rand(1, 30, 8, seed=5), cache=cache)
    _, w30 = m(x, x, x, causal=True, cache=cache)  # positions 30..34, attending over 35 keys
    torch.testing.assert_close(w30[..., 30:] / w30[..., 30:].sum(-1, keepdim=True), w0, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- the KV cache

@pytest.mark.parametrize("h, g, rotary, window", [(4, 4, False, None), (4, 2, False, None), (4, 1, True, None),
                                                   (6, 3, True, None), (4, 2, True, 3)])
@pytest.mark.parametrize("need_weights", [True, False])
def test_cached_decoding_equals_the_full_causal_forward(h, g, rotary, window, need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(h * 4, h, num_kv_heads=g, rotary=RotaryEmbedding(4) if rotary else None,
                           window=window).eval()
    x = rand(2, 11, h * 4, seed=1)
    full, full_w = m(x, x, x, causal=True)
    cache = KVCache(16)
    out, w = m(x[:, :4], x[:, :4], x[:, :4], causal=True, cache=cache, need_weights=need_weights)  # a prompt of 4
    steps, maps = [out], [w]
    for t in range(4, 11):  # then one token at a time
        out, w = m(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], causal=True, cache=cache, need_weights=need_weights)
        steps.append(out)
        maps.append(w)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    if need_weights:
        for t, w in zip([4] + list(range(5, 12)), maps):  # row t-1 of the full map, over the first t keys
            torch.testing.assert_close(w[:, :, -1], full_w[:, :, t - 1, :t], atol=1e-6, rtol=0)
    assert len(cache) == 11 and cache.k.shape == cache.v.shape == (2, g, 11, 4)  # only the g shared heads
    assert cache.nbytes() == 2 * 2 * g * 11 * 4 * 4  # 2 · B · g · length · d_k · bytes per float32


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 5), min_size=1, max_size=6), seed=st.integers(0, 999))
def test_cached_chunks_of_any_size_equal_the_full_forward(cuts, seed):
    torch.manual_seed(seed)
    m = MultiHeadAttention(8, 2, num_kv_heads=1, rotary=RotaryEmbedding(4)).eval()
    T = sum(cuts)
    x = rand(1, T, 8, seed=seed)
    full, _ = m(x, x, x, causal=True, need_weights=False)
    cache, outs, at = KVCache(T), [], 0
    for n in cuts:
        outs.append(m(x[:, at:at + n], x[:, at:at + n], x[:, at:at + n], causal=True, cache=cache)[0])
        at += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=0)


def test_the_cache_is_preallocated_and_written_in_place():
    cache = KVCache(10)
    k = rand(1, 2, 3, 4)
    cache.append(k, k + 1)
    storage = cache.k.untyped_storage().data_ptr()
    cache.append(k * 2, k)
    assert cache.k.untyped_storage().data_ptr() == storage  # no new tensor: the past is never copied
    assert torch.equal(cache.k, torch.cat([k, k * 2], dim=2)) and torch.equal(cache.v, torch.cat([k + 1, k], dim=2))


@pytest.mark.parametrize("call, says", [
    (lambda c: c.append(rand(1, 2, 8, 4), rand(1, 2, 8, 4)), "the cache holds 3 tokens and max_len is 10; 8 more would make 11"),
    (lambda c: c.append(rand(2, 2, 1, 4), rand(2, 2, 1, 4)), "the cache holds (B, g, d_k) = (1, 2, 4) but the new keys have shape (2, 2, 1, 4)"),
    (lambda c: c.append(rand(1, 2, 1, 4), rand(1, 2, 2, 4)), "v has shape (1, 2, 2, 4) but k has shape (1, 2, 1, 4)"),
    (lambda c: c.append(rand(2, 1, 4), rand(2, 1, 4)), "k must be 4-D, but it has shape (2, 1, 4)"),
])
def test_the_cache_refuses_what_does_not_fit(call, says):
    cache = KVCache(10)
    cache.append(rand(1, 2, 3, 4), rand(1, 2, 3, 4))
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        call(cache)
    assert len(cache) == 3  # a refused append leaves the cache as it was


# ---------------------------------------------------------------- removing heads (ablation)

@pytest.mark.parametrize("need_weights", [True, False])
def test_head_mask_removes_exactly_one_head(need_weights):
    torch.manual_seed(0)
    m = MultiHeadAttention(12, 3, num_kv_heads=1).eval()
    x = rand(2, 5, 12)
    keep = torch.tensor([1.0, 0.0, 1.0])
    out, _ = m(x, x, x, causal=True, need_weights=need_weights, head_mask=keep)
    q = m.split_heads(m.w_q(x))
    k, v = m.split_heads(m.w_k(x), 1), m.split_heads(m.w_v(x), 1)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, h, L, d_k)
    heads[:, 1] = 0  # head 1's output removed before the output projection
    torch.testing.assert_close(out, m.w_o(m.merge_heads(heads)), atol=1e-6, rtol=0)
    per_batch = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])  # (B, h): only the second sequence loses head 1
    both = m(x, x, x, causal=True, head_mask=per_batch)[0]
    torch.testing.assert_close(both[1], out[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(both[0], m(x, x, x, causal=True)[0][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("make, says", [
    (lambda: MultiHeadAttention(12, 4, num_kv_heads=3), "num_heads must be a multiple of num_kv_heads, got num_heads=4 and num_kv_heads=3"),
    (lambda: MultiHeadAttention(12, 4, num_kv_heads=0), "got num_heads=4 and num_kv_heads=0"),
    (lambda: MultiHeadAttention(8, 2, rotary=RotaryEmbedding(8)), "rotary must be a RotaryEmbedding with head_dim = d_k = 4, got head_dim=8"),
    (lambda: MultiHeadAttention(8, 2, window=0), "window must be a positive int or None, got 0"),
    (lambda: MultiHeadAttention(8, 2)(rand(2, 3, 8), rand(2, 3, 8), rand(2, 3, 8), head_mask=torch.ones(3)),
     "head_mask has shape (3,) but it must be (h,) = (2,) or (B, h) = (2, 2)"),
    (lambda: MultiHeadAttention(8, 2)(rand(2, 3, 8), rand(2, 4, 8), rand(2, 4, 8), cache=KVCache(9)),
     "a cache serves self-attention: query has shape (2, 3, 8) but key has shape (2, 4, 8)"),
    (lambda: MultiHeadAttention(8, 2)(rand(2, 3, 8), rand(2, 3, 8), rand(2, 3, 8), cache=[]), "cache must be a KVCache, got list"),
    (lambda: MultiHeadAttention(8, 2, num_kv_heads=1).copy_from_torch(nn.MultiheadAttention(8, 2)),
     "this module has num_kv_heads=1, rotary=False, window=None"),
    (lambda: KVCache(0), "max_len must be a positive int, got 0"),
])
def test_new_options_refuse_bad_inputs_by_name(make, says):
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        make()


def test_a_key_padding_mask_covers_the_cached_keys_too():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = rand(1, 6, 8)
    cache = KVCache(8)
    m(x[:, :5], x[:, :5], x[:, :5], cache=cache)
    real = torch.tensor([[False, True, True, True, True, True]])  # key 0 is padding
    _, w = m(x[:, 5:], x[:, 5:], x[:, 5:], cache=cache, key_padding_mask=real, causal=True)
    assert w.shape == (1, 2, 1, 6) and (w[..., 0] == 0).all()
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(1, 6\) but it must be \(B, Lk\) = \(1, 7\)"):
        m(x[:, 5:], x[:, 5:], x[:, 5:], cache=cache, key_padding_mask=real)
