"""Tests of attnlib/transformer.py against nn.TransformerEncoderLayer / nn.TransformerEncoder
(batch_first=True, eval mode). PyTorch's bool masks say True = blocked, ours True = may attend."""
import pytest
import torch
from torch import nn

from attnlib import KVCache, TransformerBlock, TransformerEncoder, causal_mask, padding_mask

ATOL = 1e-5
D, H, FF = 32, 4, 64


def randomise(module, seed):
    """Give every parameter (LayerNorm and biases too) random values, so that copying each one matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def torch_layer(norm_first, activation, seed=0):
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first)
    return randomise(layer, seed).eval()


def x_input(B=3, L=6, seed=1):
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("causal", [False, True], ids=["no-mask", "causal"])
def test_block_equals_torch_layer(norm_first, activation, causal):
    theirs = torch_layer(norm_first, activation)
    ours = TransformerBlock(D, H, FF, dropout=0.1, activation=activation, norm_first=norm_first)
    ours.copy_from_torch(theirs).eval()
    x = x_input()
    mask = causal_mask(6) if causal else None
    with torch.no_grad():  # lets PyTorch take its fused fast path too
        expected = theirs(x, src_mask=None if mask is None else ~mask)  # opposite polarity
        out = ours(x, mask=mask)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    # the same with autograd on (PyTorch's slow, plain path)
    torch.testing.assert_close(ours(x, mask=mask), theirs(x, src_mask=None if mask is None else ~mask), atol=ATOL, rtol=0)


def test_block_equals_torch_layer_with_padding():
    theirs, ours = torch_layer(False, "relu", seed=2), TransformerBlock(D, H, FF)
    ours.copy_from_torch(theirs).eval()
    x = x_input(B=2, L=5)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    out = ours(x, mask=keep[:, None, None, :])
    expected = theirs(x, src_key_padding_mask=~keep)
    torch.testing.assert_close(out[keep], expected[keep], atol=ATOL, rtol=0)  # real tokens
    by_argument = ours(x, key_padding_mask=keep)
    torch.testing.assert_close(by_argument, out, atol=ATOL, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_key_padding_mask_equals_torch_when_batch_equals_length(norm_first):
    layer = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, norm_first=norm_first)
    theirs = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(D) if norm_first else None,
                                   enable_nested_tensor=False)
    randomise(theirs, seed=5).eval()
    ours = TransformerEncoder(2, D, H, FF, norm_first=norm_first)
    for mine, their_layer in zip(ours.layers, theirs.layers):
        mine.copy_from_torch(their_layer)
    if norm_first:
        ours.final_norm.load_state_dict(theirs.norm.state_dict())
    ours.eval()
    x = x_input(B=4, L=4)  # B == L: a (B, L) mask passed as `mask` would be read as (Lq, Lk)
    keep = padding_mask([4, 1, 3, 2], 4)
    out, maps = ours(x, key_padding_mask=keep, return_attention=True)
    expected = theirs(x, src_key_padding_mask=~keep)
    torch.testing.assert_close(out[keep], expected[keep], atol=ATOL, rtol=0)
    assert all((w[1, :, :, 1:] == 0).all() for w in maps)  # sequence 1 has one real token
    with pytest.raises(ValueError, match=r"a 3-D mask is ambiguous here"):
        ours(x, mask=keep[:, None, :])  # (B, 1, L) is not a multi-head mask


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_stacked_encoder_equals_torch_encoder(norm_first):
    layer = nn.TransformerEncoderLayer(D, H, FF, activation="gelu", batch_first=True, norm_first=norm_first)
    final = nn.LayerNorm(D) if norm_first else None
    theirs = nn.TransformerEncoder(layer, num_layers=3, norm=final, enable_nested_tensor=False)
    randomise(theirs, seed=3).eval()  # every layer gets its own weights
    ours = TransformerEncoder(3, D, H, FF, activation="gelu", norm_first=norm_first)
    for mine, their_layer in zip(ours.layers, theirs.layers):
        mine.copy_from_torch(their_layer)
    if norm_first:
        ours.final_norm.load_state_dict(theirs.norm.state_dict())
    ours.eval()
    x = x_input()
    torch.testing.assert_close(ours(x), theirs(x), atol=ATOL, rtol=0)
    mask = causal_mask(6)
    torch.testing.assert_close(ours(x, mask), theirs(x, mask=~mask), atol=ATOL, rtol=0)


def test_return_attention_gives_row_stochastic_maps():
    torch.manual_seed(0)
    enc = TransformerEncoder(2, D, H, FF, dropout=0.0).eval()
    x = x_input(B=2, L=5)
    out, maps = enc(x, causal_mask(5), return_attention=True)
    torch.testing.assert_close(out, enc(x, causal_mask(5)))  # asking for maps changes nothing
    assert len(maps) == 2
    for w in maps:
        assert w.shape == (2, H, 5, 5)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 5), atol=ATOL, rtol=0)
        assert (w.triu(1) == 0).all()
    block = enc.layers[0]
    y, w = block(x, return_attention=True)
    assert y.shape == x.shape and w.shape == (2, H, 5, 5)
    assert block(x, return_attention=False).shape == x.shape


def test_parameter_count_equals_torch():
    ours = TransformerBlock(D, H, FF)
    theirs = nn.TransformerEncoderLayer(D, H, FF, batch_first=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())


def test_unknown_activation():
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'relu'\], got 'tanh'"):
        TransformerBlock(D, H, FF, activation="tanh")
    with pytest.raises(ValueError, match="activation must be one of"):
        TransformerEncoder(2, D, H, FF, activation="swish")


def test_copy_from_torch_size_mismatch():
    with pytest.raises(ValueError, match=r"shape mismatch: ours \(128, 32\), PyTorch's \(64, 32\)"):
        TransformerBlock(D, H, 128).copy_from_torch(nn.TransformerEncoderLayer(D, H, FF, batch_first=True))
    with pytest.raises(ValueError, match="embed_dim=16"):
        TransformerBlock(D, H, FF).copy_from_torch(nn.TransformerEncoderLayer(16, H, FF, batch_first=True))


@pytest.mark.parametrize(
    "ours_kwargs, theirs_kwargs, message",
    [
        ({"norm_first": False}, {"norm_first": True}, "norm_first=True but this block has norm_first=False"),
        ({"activation": "relu"}, {"activation": "gelu"}, r"activation gelu computes other values than this block's ReLU\(\)"),
        ({"activation": "gelu"}, {"activation": "relu"}, r"activation relu computes other values than this block's GELU"),
        ({"activation": "gelu"}, {"activation": nn.GELU(approximate="tanh")},  # a "gelu" by name, accepted before
         r"activation GELU\(approximate='tanh'\) computes other values than this block's GELU\(approximate='none'\) "
         r"\(largest difference [0-9.]+e-04"),
        ({}, {"layer_norm_eps": 1e-6}, "layer_norm_eps=1e-06 but this block has layer_norm_eps=1e-05"),
        ({}, {"bias": False}, "bias=False but this block has bias=True"),
    ],
)
def test_copy_from_torch_refuses_a_different_architecture(ours_kwargs, theirs_kwargs, message):
    """Without these checks the copy succeeded silently and the outputs differed."""
    theirs = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, **theirs_kwargs)
    with pytest.raises(ValueError, match=message):
        TransformerBlock(D, H, FF, **ours_kwargs).copy_from_torch(theirs)


def test_copy_from_torch_accepts_any_activation_that_computes_the_same():
    """Behaviour, not names: a hand-written ReLU is a ReLU (refused by name before)."""
    theirs = randomise(nn.TransformerEncoderLayer(D, H, FF, activation=lambda t: t.clamp(min=0), batch_first=True), 7)
    ours = TransformerBlock(D, H, FF, activation="relu").copy_from_torch(theirs.eval()).eval()
    x = x_input()
    torch.testing.assert_close(ours(x), theirs(x), atol=ATOL, rtol=0)


def test_copy_from_a_sequence_first_layer():
    theirs = randomise(nn.TransformerEncoderLayer(D, H, FF), seed=8).eval()  # batch_first=False: (L, B, d)
    ours = TransformerBlock(D, H, FF).copy_from_torch(theirs).eval()
    x = x_input()
    torch.testing.assert_close(ours(x), theirs(x.transpose(0, 1)).transpose(0, 1), atol=ATOL, rtol=0)


def test_copy_from_torch_checks_behaviour_and_undoes_a_bad_copy():
    """A layer that passes every structural check but computes something else."""

    class Shifted(nn.TransformerEncoderLayer):
        def forward(self, src, *args, **kwargs):
            return super().forward(src, *args, **kwargs) + 1.0

    ours = TransformerBlock(D, H, FF)
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with pytest.raises(ValueError, match="nn.TransformerEncoderLayer give different outputs on a probe input"):
        ours.copy_from_torch(Shifted(D, H, FF, batch_first=True))
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())  # attention weights included


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_causal_and_a_cache_go_through_the_block(norm_first):
    """causal=True equals the causal mask; a cached block fed a token at a time equals the full forward."""
    torch.manual_seed(0)
    block = TransformerBlock(D, H, FF, dropout=0.0, norm_first=norm_first).eval()
    x = x_input(B=2, L=7)
    full = block(x, mask=causal_mask(7))
    torch.testing.assert_close(block(x, causal=True), full, atol=1e-6, rtol=0)
    cache = KVCache(7)
    steps = [block(x[:, :3], causal=True, cache=cache)] + [block(x[:, t:t + 1], causal=True, cache=cache)
                                                            for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
