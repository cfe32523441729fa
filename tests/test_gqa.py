"""Tests of attnlib/gqa.py: against MultiHeadAttention (g = h, and g < h with repeated K/V weights),
against F.scaled_dot_product_attention(enable_gqa=True), and the KV cache."""
import inspect

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from attnlib.attention import causal_mask
from attnlib.gqa import GroupedQueryAttention
from attnlib.multihead import MultiHeadAttention

FAST = settings(max_examples=30, deadline=None)
HAS_ENABLE_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def heads_and_groups():
    return st.sampled_from([(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (6, 3), (6, 2), (8, 2)])


@FAST
@given(hg=heads_and_groups(), d_k=st.integers(1, 6), lq=st.integers(1, 9), lk=st.integers(1, 9),
       bias=st.booleans(), seed=st.integers(0, 999), need_weights=st.booleans(), masked=st.booleans())
def test_equals_multihead_attention_with_repeated_kv_weights(hg, d_k, lq, lk, bias, seed, need_weights, masked):
    h, g = hg
    d = h * d_k
    torch.manual_seed(seed)
    gqa = GroupedQueryAttention(d, h, g, bias=bias).eval()
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


@FAST
@given(h=st.sampled_from([1, 2, 4]), d_k=st.integers(1, 8), L=st.integers(1, 10), seed=st.integers(0, 999))
def test_with_g_equal_h_a_multihead_state_dict_loads_and_outputs_are_equal(h, d_k, L, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(h * d_k, h).eval()
    gqa = GroupedQueryAttention(h * d_k, h, h).eval()
    gqa.load_state_dict(mha.state_dict())  # strict: same names, same shapes
    x = rand(3, L, h * d_k, seed=seed)
    torch.testing.assert_close(gqa(x, x, x)[0], mha(x, x, x)[0], atol=1e-6, rtol=0)


@pytest.mark.skipif(not HAS_ENABLE_GQA, reason="this torch has no enable_gqa")
@FAST
@given(hg=heads_and_groups(), d_k=st.integers(1, 8), L=st.integers(1, 12), seed=st.integers(0, 999))
def test_grouping_equals_pytorch_enable_gqa(hg, d_k, L, seed):
    h, g = hg
    torch.manual_seed(seed)
    gqa = GroupedQueryAttention(h * d_k, h, g).eval()
    x = rand(2, L, h * d_k, seed=seed)
    q = gqa._split(gqa.w_q(x), h)  # (B, h, L, d_k)
    k, v = gqa._split(gqa.w_k(x), g), gqa._split(gqa.w_v(x), g)  # (B, g, L, d_k)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # (B, h, L, d_k)
    expected = gqa.w_o(heads.transpose(1, 2).reshape(2, L, h * d_k))
    out, _ = gqa(x, x, x, mask=causal_mask(L))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_the_signature_is_that_of_multihead_attention():
    ours = list(inspect.signature(GroupedQueryAttention.forward).parameters)
    assert ours == list(inspect.signature(MultiHeadAttention.forward).parameters)


@pytest.mark.parametrize("h, g, rotary", [(4, 4, False), (4, 2, False), (4, 1, True), (6, 3, True)])
def test_cached_decoding_equals_the_full_causal_forward(h, g, rotary):
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(h * 4, h, g, rotary=rotary).eval()
    x = rand(2, 11, h * 4, seed=1)
    full, _ = gqa(x, x, x, mask=causal_mask(11))
    out, cache = gqa.forward_with_cache(x[:, :4])  # a prompt of 4 tokens, then one token at a time
    steps = [out]
    for t in range(4, 11):
        out, cache = gqa.forward_with_cache(x[:, t:t + 1], cache)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache[0].shape == cache[1].shape == (2, g, 11, 4)  # only the g shared heads are stored


def test_rotary_makes_self_attention_see_order():
    torch.manual_seed(0)
    plain, rope = GroupedQueryAttention(8, 2, 1).eval(), GroupedQueryAttention(8, 2, 1, rotary=True).eval()
    rope.load_state_dict(plain.state_dict())
    x, perm = rand(1, 6, 8, seed=3), torch.tensor([3, 1, 5, 0, 2, 4])
    for module, equivariant in ((plain, True), (rope, False)):
        out, out_perm = module(x, x, x)[0], module(x[:, perm], x[:, perm], x[:, perm])[0]
        assert torch.allclose(out[:, perm], out_perm, atol=1e-6) == equivariant


@pytest.mark.parametrize("make, message", [
    (lambda: GroupedQueryAttention(12, 4, 3), "num_heads must be a multiple of num_kv_heads, got num_heads=4 and num_kv_heads=3"),
    (lambda: GroupedQueryAttention(12, 4, 0), "got num_heads=4 and num_kv_heads=0"),
    (lambda: GroupedQueryAttention(10, 4, 2), "d_model must be divisible by num_heads, got d_model=10 and num_heads=4"),
    (lambda: GroupedQueryAttention(8, 4, 2)(rand(2, 3, 6), rand(2, 3, 8), rand(2, 3, 8)),
     r"query has shape \(2, 3, 6\) but its last dimension must be d_model=8"),
    (lambda: GroupedQueryAttention(8, 4, 2)(rand(2, 3, 8), rand(2, 3, 8), rand(2, 3, 8), mask=torch.ones(3, 4, dtype=torch.bool)),
     r"mask has shape \(3, 4\) but it must be a 2-D \(Lq, Lk\) = \(3, 3\) mask or a 4-D \(B, h, Lq, Lk\) = \(2, 4, 3, 3\) mask"),
    (lambda: GroupedQueryAttention(8, 4, 2)(rand(2, 3, 8), rand(2, 5, 8), rand(2, 4, 8)),
     r"key \(2, 5, 8\) and value \(2, 4, 8\)"),
    (lambda: GroupedQueryAttention(8, 4, 2).forward_with_cache(rand(2, 1, 8), (rand(2, 4, 3, 2), rand(2, 4, 3, 2))),
     r"cache holds k \(2, 4, 3, 2\) and v \(2, 4, 3, 2\); expected both \(2, 2, T_past, 2\)"),
])
def test_bad_inputs_name_expected_and_actual(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_key_padding_mask_equals_the_same_mask_given_in_full():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(16, 4, 2).eval()
    x = torch.randn(2, 5, 16)
    real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])  # (B, Lk): True = a real token
    with torch.no_grad():
        a, wa = gqa(x, x, x, key_padding_mask=real)
        b, wb = gqa(x, x, x, mask=real[:, None, None, :])
    assert torch.equal(a, b) and torch.equal(wa, wb)
    assert (wa[1, :, :, 3:] == 0).all()  # the padding gets no weight
