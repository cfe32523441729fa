"""Tests of attnlib/rnn_attention.py: Bahdanau and Luong scores, key padding masks, the unchecked attend, errors,
gradients."""
import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnlib import AdditiveAttention, LuongAttention


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def modules(dq=6, dk=6):
    torch.manual_seed(0)
    return [AdditiveAttention(dq, dk, 5), LuongAttention(dq, dk, "dot"),
            LuongAttention(dq, dk, "general"), LuongAttention(dq, dk, "concat", attn_dim=7)]


@pytest.mark.parametrize("att", modules(), ids=["additive", "dot", "general", "concat"])
def test_shapes_rows_sum_to_one_and_context_is_weighted_sum(att):
    q, k = rand(3, 6, seed=1), rand(3, 4, 6, seed=2)
    ctx, w = att(q, k)
    assert ctx.shape == (3, 6) and w.shape == (3, 4)
    torch.testing.assert_close(w.sum(-1), torch.ones(3))
    torch.testing.assert_close(ctx, torch.einsum("bl,bld->bd", w, k))
    ctx2, w2 = att(q, k, keys_proj=att.project_keys(k))
    torch.testing.assert_close(w2, w)


def test_scores_match_formulas():
    q, k = rand(2, 6, seed=1), rand(2, 4, 6, seed=2)
    add, dot, gen, cat = modules()
    _, w = dot(q, k)
    torch.testing.assert_close(w, torch.softmax(torch.einsum("bd,bld->bl", q, k), -1))
    _, w = gen(q, k)  # s^T W h with W = gen.W.weight (Dq, Dk)
    torch.testing.assert_close(w, torch.softmax(torch.einsum("bd,de,ble->bl", q, gen.W.weight, k), -1))
    _, w = cat(q, k)  # v^T tanh(W [s; h])
    sh = torch.cat([q[:, None].expand(-1, 4, -1), k], -1)
    torch.testing.assert_close(w, torch.softmax(cat.v(torch.tanh(cat.W(sh))).squeeze(-1), -1))
    _, w = add(q, k)  # v^T tanh(W_s s + W_h h)
    e = add.v(torch.tanh(add.W_s(q)[:, None] + add.W_h(k))).squeeze(-1)
    torch.testing.assert_close(w, torch.softmax(e, -1))


@pytest.mark.parametrize("att", modules(), ids=["additive", "dot", "general", "concat"])
def test_key_padding_masks(att):
    q, k = rand(3, 6, seed=1), rand(3, 5, 6, seed=2)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 1, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    ctx, w = att(q, k, key_padding_mask=mask)
    assert (w[~mask] == 0).all()
    torch.testing.assert_close(w[:2].sum(-1), torch.ones(2))
    assert (w[2] == 0).all() and (ctx[2] == 0).all() and not torch.isnan(ctx).any()
    # masked keys do not matter, whatever their values
    k2 = k.clone()
    k2[~mask] = 1e3
    torch.testing.assert_close(att(q, k2, mask)[0][:2], ctx[:2])
    # first row equals attention over the first 3 keys only
    torch.testing.assert_close(att(q[:1], k[:1, :3])[1], w[:1, :3])


def test_errors():
    add, dot, gen, cat = modules()
    q, k = rand(3, 6), rand(3, 4, 6)
    with pytest.raises(ValueError, match=r"query_dim=4 and key_dim=6"):
        LuongAttention(4, 6, "dot")
    with pytest.raises(ValueError, match=r"one of \('dot', 'general', 'concat'\), got 'cosine'"):
        LuongAttention(6, 6, "cosine")
    with pytest.raises(ValueError, match=r"batch sizes must match"):
        add(rand(2, 6), k)
    with pytest.raises(ValueError, match=r"query has shape \(3, 5\) but query_dim is 6"):
        add(rand(3, 5), k)
    with pytest.raises(ValueError, match=r"keys has shape \(3, 4, 5\) but key_dim is 6"):
        gen(q, rand(3, 4, 5))
    with pytest.raises(ValueError, match=r"query must be 2-D"):
        dot(rand(3, 1, 6), k)
    with pytest.raises(ValueError, match=r"keys must be 3-D"):
        dot(q, rand(4, 6))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(3, 5\) but it must be \(B, L\) = \(3, 4\)"):
        cat(q, k, torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(4,\) but it must be \(B, L\) = \(3, 4\) \(2-D"):
        cat(q, k, torch.ones(4, dtype=torch.bool))  # used to broadcast over the batch silently
    with pytest.raises(ValueError, match=r"key_padding_mask must have dtype torch.bool"):
        cat(q, k, torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"query has shape \(2, 6\) but keys has shape \(3, 4, 6\); the batch sizes"):
        add(rand(2, 6), k)
    with pytest.raises(ValueError, match=r"keys_proj has shape"):
        add(q, k, keys_proj=rand(3, 2, 5))
    with pytest.raises(ValueError, match="attn_dim must be a positive int, got 0"):
        AdditiveAttention(6, 6, 0)
    with pytest.raises(ValueError, match="attn_dim must be a positive int, got 2.5"):
        LuongAttention(6, 6, "concat", attn_dim=2.5)
    with pytest.raises(ValueError, match="query_dim must be a positive int, got True"):
        LuongAttention(True, 6, "general")


def test_parameter_counts():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(LuongAttention(8, 8, "dot")) == 0
    assert count(LuongAttention(8, 16, "general")) == 8 * 16
    assert count(LuongAttention(8, 16, "concat", attn_dim=10)) == 10 * 24 + 10
    assert count(AdditiveAttention(8, 16, 10)) == 10 * 8 + 10 * 16 + 10 + 10


@pytest.mark.parametrize("idx", range(4), ids=["additive", "dot", "general", "concat"])
def test_gradcheck_float64(idx):
    att = modules(4, 4)[idx].double()
    q = rand(2, 4, seed=1, dtype=torch.float64).requires_grad_()
    k = rand(2, 3, 4, seed=2, dtype=torch.float64).requires_grad_()
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda q, k: att(q, k, mask), (q, k))


@pytest.mark.parametrize("idx", range(4), ids=["additive", "dot", "general", "concat"])
def test_need_weights_false_returns_the_same_context_and_no_weights(idx):
    att = modules()[idx]
    q, k = rand(3, 6, seed=1), rand(3, 4, 6, seed=2)
    ctx, w = att(q, k, need_weights=False)
    assert w is None
    torch.testing.assert_close(ctx, att(q, k)[0], atol=0, rtol=0)


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 4), L=st.integers(1, 7), idx=st.integers(0, 3), seed=st.integers(0, 10**6), data=st.data())
def test_hypothesis_attend_equals_forward_for_every_mask_with_a_real_key(B, L, idx, seed, data):
    """The decoders' unchecked path gives forward's context and weights, padding or not."""
    att = modules()[idx]
    q, k = rand(B, 6, seed=seed), rand(B, L, 6, seed=seed + 1)
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, L), min_size=B, max_size=B)))
    mask = torch.arange(L)[None, :] < lengths[:, None]  # (B, L): at least one real key per row
    for m in (mask, None):
        want = att(q, k, key_padding_mask=m)
        got = att.attend(q, k, att.project_keys(k), m)
        torch.testing.assert_close(got[0], want[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(got[1], want[1], atol=1e-6, rtol=0)
        if m is not None:
            assert (got[1][~m] == 0).all()

