"""Tests of attnlib/decoder.py against nn.TransformerDecoderLayer / nn.TransformerDecoder (batch_first=True).

PyTorch's bool masks say True = blocked, ours True = may attend: every comparison passes ``~mask`` to PyTorch.
"""
import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

from attnlib import causal_mask
from attnlib.decoder import TransformerDecoderBlock

ATOL = 1e-5
D, H, FF = 32, 4, 64


def randomise(module, seed):
    """Random values for every parameter (LayerNorm weights and biases too), so that copying each one matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def torch_layer(norm_first=False, activation="relu", seed=0, d=D, h=H, ff=FF, **kw):
    layer = nn.TransformerDecoderLayer(d, h, ff, dropout=0.1, activation=activation, batch_first=True,
                                       norm_first=norm_first, **kw)
    return randomise(layer, seed).eval()


def inputs(B=3, Lt=5, Ls=7, d=D, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, Lt, d, generator=g), torch.randn(B, Ls, d, generator=g)


def padding(lengths, L):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L) True = real


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "causal", "causal+padding"])
def test_block_equals_torch_decoder_layer(norm_first, activation, masks):
    theirs = torch_layer(norm_first, activation)
    ours = TransformerDecoderBlock(D, H, FF, dropout=0.1, activation=activation, norm_first=norm_first)
    ours.copy_from_torch(theirs).eval()
    x, memory = inputs()
    causal = masks != "none"
    keep = padding([7, 4, 2], 7) if masks == "causal+padding" else None
    kwargs = dict(tgt_mask=~causal_mask(5) if causal else None, memory_key_padding_mask=None if keep is None else ~keep)
    for grad in (False, True):  # no_grad lets PyTorch take its fused fast path; with grad, the plain path
        with torch.set_grad_enabled(grad):
            expected = theirs(x, memory, **kwargs)
            out = ours(x, memory, memory_key_padding_mask=keep, causal=causal)
            same = ours(x, memory, causal_mask(5) if causal else None, keep)  # the mask given in full
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
        torch.testing.assert_close(same, expected, atol=ATOL, rtol=0)


def test_block_returns_both_maps_with_the_right_shapes_and_masked_entries_zero():
    torch.manual_seed(0)
    block = TransformerDecoderBlock(D, H, FF, dropout=0.0).eval()
    x, memory = inputs(B=2, Lt=4, Ls=6)
    keep = padding([6, 3], 6)
    out, self_w, cross_w = block(x, memory, memory_key_padding_mask=keep, return_attention=True, causal=True)
    assert out.shape == x.shape and self_w.shape == (2, H, 4, 4) and cross_w.shape == (2, H, 4, 6)
    torch.testing.assert_close(self_w.sum(-1), torch.ones(2, H, 4))
    torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, H, 4))
    assert (self_w.triu(1) == 0).all()  # no query looks at a later target
    assert (cross_w[1, :, :, 3:] == 0).all()  # nor at the pads of the second source
    torch.testing.assert_close(out, block(x, memory, causal_mask(4), keep))


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), Lt=st.integers(1, 6), Ls=st.integers(1, 6), heads=st.sampled_from([1, 2, 4]),
       norm_first=st.booleans(), activation=st.sampled_from(["relu", "gelu"]), seed=st.integers(0, 10_000),
       data=st.data())
def test_hypothesis_block_equals_torch(B, Lt, Ls, heads, norm_first, activation, seed, data):
    d = 8 * heads
    theirs = torch_layer(norm_first, activation, seed=seed, d=d, h=heads, ff=2 * d)
    ours = TransformerDecoderBlock(d, heads, 2 * d, activation=activation, norm_first=norm_first)
    ours.copy_from_torch(theirs).eval()
    x, memory = inputs(B, Lt, Ls, d=d, seed=seed + 1)
    lengths = data.draw(st.lists(st.integers(1, Ls), min_size=B, max_size=B))  # >= 1 real key per source
    keep = padding(lengths, Ls)
    with torch.no_grad():
        expected = theirs(x, memory, tgt_mask=~causal_mask(Lt), memory_key_padding_mask=~keep)
        out = ours(x, memory, causal_mask(Lt), keep)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


@settings(max_examples=20, deadline=None)
@given(Lt=st.integers(2, 7), t=st.data(), seed=st.integers(0, 10_000), norm_first=st.booleans())
def test_causal_block_leaks_nothing_from_later_targets(Lt, t, seed, norm_first):
    """Changing target positions > t changes nothing at positions <= t, and the gradient from the future is zero."""
    torch.manual_seed(seed)
    block = TransformerDecoderBlock(D, H, FF, dropout=0.0, norm_first=norm_first).eval()
    x, memory = inputs(2, Lt, 5, seed=seed)
    cut = t.draw(st.integers(0, Lt - 2))
    changed = x.clone()
    changed[:, cut + 1:] += torch.randn_like(changed[:, cut + 1:])
    out, out_changed = block(x, memory, causal_mask(Lt)), block(changed, memory, causal_mask(Lt))
    torch.testing.assert_close(out[:, : cut + 1], out_changed[:, : cut + 1], atol=1e-6, rtol=0)
    assert not torch.allclose(out[:, cut + 1:], out_changed[:, cut + 1:])  # the later positions did see it
    x = x.clone().requires_grad_()
    probe = torch.randn(2, D, generator=torch.Generator().manual_seed(seed))  # not .sum(): a LayerNorm's sum is constant
    (block(x, memory, causal_mask(Lt))[:, cut] * probe).sum().backward()
    assert (x.grad[:, cut + 1:] == 0).all() and x.grad[:, : cut + 1].abs().sum() > 0


def test_stack_of_blocks_equals_torch_decoder():
    layer = nn.TransformerDecoderLayer(D, H, FF, activation="gelu", batch_first=True, norm_first=True)
    theirs = randomise(nn.TransformerDecoder(layer, num_layers=3, norm=nn.LayerNorm(D)), seed=5).eval()
    blocks = [TransformerDecoderBlock(D, H, FF, activation="gelu", norm_first=True).copy_from_torch(t).eval()
              for t in theirs.layers]
    final = nn.LayerNorm(D)
    final.load_state_dict(theirs.norm.state_dict())
    x, memory = inputs()
    ours = x
    for block in blocks:
        ours = block(ours, memory, causal_mask(5))
    torch.testing.assert_close(final(ours), theirs(x, memory, tgt_mask=~causal_mask(5)), atol=ATOL, rtol=0)


# ------------------------------------------------------------------ copy_from_torch refuses what would differ

@pytest.mark.parametrize("layer_kwargs, block_kwargs, names", [
    (dict(norm_first=True), dict(), "norm_first"),
    (dict(activation="gelu"), dict(), "activation"),
    (dict(activation=nn.GELU(approximate="tanh")), dict(activation="gelu"), "activation"),
    (dict(activation=torch.tanh), dict(), "activation"),
    (dict(layer_norm_eps=1e-6), dict(), "layer_norm_eps"),
    (dict(batch_first=False), dict(), "batch_first"),
    (dict(bias=False), dict(), "bias"),
    (dict(dropout=0.3), dict(), "dropout"),
    (dict(dim_feedforward=96), dict(), "d_ff"),
    (dict(nhead=2), dict(), "num_heads"),
])
def test_copy_refuses_a_layer_that_would_give_different_outputs(layer_kwargs, block_kwargs, names):
    kw = dict(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.1, batch_first=True) | layer_kwargs
    layer = nn.TransformerDecoderLayer(**kw)
    block = TransformerDecoderBlock(D, H, FF, **block_kwargs)
    before = {k: v.clone() for k, v in block.state_dict().items()}
    with pytest.raises(ValueError, match=names):
        block.copy_from_torch(layer)
    assert all(torch.equal(before[k], v) for k, v in block.state_dict().items())  # nothing half-copied


def test_copy_compares_the_activation_by_value_not_by_name():
    """A module or a lambda that computes ReLU is accepted; the copy then matches PyTorch."""
    for act in (nn.ReLU(), lambda t: torch.clamp(t, min=0)):
        layer = randomise(nn.TransformerDecoderLayer(D, H, FF, activation=act, batch_first=True), 7).eval()
        block = TransformerDecoderBlock(D, H, FF).copy_from_torch(layer).eval()
        x, memory = inputs()
        torch.testing.assert_close(block(x, memory), layer(x, memory), atol=ATOL, rtol=0)


def test_the_refused_activation_message_names_both_and_the_gap():
    layer = nn.TransformerDecoderLayer(D, H, FF, activation=nn.GELU(approximate="tanh"), batch_first=True)
    with pytest.raises(ValueError, match=r"GELU\(approximate='tanh'\).*GELU\(approximate='none'\).*by up to"):
        TransformerDecoderBlock(D, H, FF, activation="gelu").copy_from_torch(layer)


def test_copy_refuses_something_else():
    with pytest.raises(ValueError, match="expected an nn.TransformerDecoderLayer, got TransformerEncoderLayer"):
        TransformerDecoderBlock(D, H, FF).copy_from_torch(nn.TransformerEncoderLayer(D, H, FF, batch_first=True))


# ------------------------------------------------------------------ bad inputs name expected and actual shapes

@pytest.mark.parametrize("x_shape, m_shape, mask, memory_key_padding_mask, message", [
    ((2, 5, D), (3, 7, D), None, None, r"x has shape \(2, 5, 32\) but memory has shape \(3, 7, 32\); the batch sizes"),
    ((2, 5, 16), (2, 7, D), None, None, r"x has shape \(2, 5, 16\) but its last dimension must be d_model=32"),
    ((2, 5, D), (2, 7, 16), None, None, r"memory has shape \(2, 7, 16\) but its last dimension must be d_model=32"),
    ((2, 5), (2, 7, D), None, None, r"x must be 3-D, but it has shape \(2, 5\)"),
    ((2, 5, D), (2, 7, D), torch.ones(5, 7, dtype=torch.bool), None,
     r"mask has shape \(5, 7\) but it must be a 2-D \(Lq, Lk\) = \(5, 5\) mask or a 4-D \(B, h, Lq, Lk\) = \(2, 4, 5, 5\)"),
    ((2, 5, D), (2, 7, D), None, torch.ones(2, 5, dtype=torch.bool),
     r"key_padding_mask has shape \(2, 5\) but it must be \(B, Lk\) = \(2, 7\)"),
    ((2, 5, D), (2, 7, D), None, torch.ones(2, 7), r"key_padding_mask must have dtype torch.bool"),
    ((2, 5, D), (2, 7, D), torch.ones(5, 5), None, r"mask must have dtype torch.bool \(True = may attend\), got torch.float32"),
])
def test_bad_inputs_raise_value_errors_naming_the_shapes(x_shape, m_shape, mask, memory_key_padding_mask, message):
    block = TransformerDecoderBlock(D, H, FF)
    with pytest.raises(ValueError, match=message):
        block(torch.randn(*x_shape), torch.randn(*m_shape), mask, memory_key_padding_mask)
