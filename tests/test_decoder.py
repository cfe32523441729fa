"""Tests of attnlib/decoder.py against nn.TransformerDecoderLayer / nn.TransformerDecoder (batch_first=True).

PyTorch's bool masks say True = blocked, ours True = may attend: every comparison passes ``~mask`` to PyTorch.
"""
import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

from attnlib import causal_mask, make_dates
from attnlib.decoder import TransformerDecoderBlock
from attnlib.seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig, evaluate_transformer, sequence_loss

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


# ------------------------------------------------------------------ the encoder-decoder model

def small_model(seed=0, **kw):
    torch.manual_seed(seed)
    config = Seq2SeqTransformerConfig(src_vocab_size=20, tgt_vocab_size=9, d_model=16, num_heads=2, d_ff=32,
                                      max_len=16, **kw)
    return Seq2SeqTransformer(config).eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_one_pass_logits_equal_step_by_step_logits(norm_first):
    """Teacher forcing in one pass: position t of the full pass equals a pass over the prefix 0..t alone."""
    model = small_model(norm_first=norm_first)
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(3, 20, (3, 8), generator=g), torch.randint(3, 9, (3, 6), generator=g)
    keep = padding([8, 5, 3], 8)
    with torch.no_grad():
        memory = model.encode(src, keep)
        full = model(src, model.shift_right(tgt), keep)  # (3, 6, 9)
        tgt_in = model.shift_right(tgt)
        for t in range(6):
            step = model.decode(tgt_in[:, : t + 1], memory, keep)[:, -1]
            torch.testing.assert_close(full[:, t], step, atol=ATOL, rtol=0)


def test_padding_the_source_changes_nothing():
    model = small_model()
    src = torch.tensor([[5, 6, 7, 2]])
    padded = torch.tensor([[5, 6, 7, 2, 0, 0, 0]])
    ids, cross = model.greedy_decode(src, max_len=5)
    ids_p, cross_p = model.greedy_decode(padded, padded != 0, max_len=5)
    assert torch.equal(ids, ids_p)
    for a, b in zip(cross, cross_p):
        torch.testing.assert_close(a, b[..., :4], atol=1e-6, rtol=0)
        assert (b[..., 4:] == 0).all()


def test_greedy_decode_matches_argmax_of_one_pass_on_its_own_output():
    model = small_model(seed=3)
    src = torch.randint(3, 20, (4, 6), generator=torch.Generator().manual_seed(1))
    ids, cross = model.greedy_decode(src, max_len=7)
    assert ids.shape[0] == 4 and ids.shape[1] <= 7 and len(cross) == 2
    assert cross[0].shape == (4, 2, ids.shape[1], 6)
    with torch.no_grad():
        logits = model(src, model.shift_right(ids))
    done = (ids == 2).cumsum(1) - (ids == 2).long() > 0  # positions after each sequence's <eos>
    assert torch.equal(logits.argmax(-1)[~done], ids[~done])
    assert (ids[done] == 0).all()


def test_greedy_decode_restores_training_mode():
    model = small_model(dropout=0.1).train()
    model.greedy_decode(torch.tensor([[4, 5, 2]]), max_len=3)
    assert model.training


def test_model_bad_inputs():
    model = small_model()
    with pytest.raises(ValueError, match=r"src has shape \(2, 4\) but tgt_in has shape \(3, 4\)"):
        model(torch.ones(2, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tgt_in has shape \(1, 17\) but max_len is 16"):
        model(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src must be integer ids of shape \(B, L\), got dtype torch.float32"):
        model.encode(torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"src_mask must be bool with the shape of src \(1, 4\)"):
        model.encode(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"logits has shape \(2, 3, 9\) but tgt has shape \(2, 4\)"):
        sequence_loss(torch.zeros(2, 3, 9), torch.zeros(2, 4, dtype=torch.long))


def test_save_and_load_give_the_same_model(tmp_path):
    model = small_model(seed=4, norm_first=True)
    path = tmp_path / "m.pt"
    model.save(path, note="hello", accuracy=0.5)
    loaded, extra = Seq2SeqTransformer.load(path)
    assert extra == {"note": "hello", "accuracy": 0.5} and not loaded.training
    src = torch.randint(3, 20, (2, 5), generator=torch.Generator().manual_seed(2))
    assert torch.equal(model.greedy_decode(src, max_len=6)[0], loaded.greedy_decode(src, max_len=6)[0])
    torch.load(path, weights_only=True)  # plain types only


def test_a_few_training_steps_learn_dates():
    """A short run on the date task must lower the loss a lot and score above chance: the loop is wired right."""
    data = make_dates(512, seed=0)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqTransformerConfig(len(data.src_vocab), len(data.tgt_vocab), d_model=32,
                                                        num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                                        d_ff=64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    mask = data.src_mask
    losses = []
    for step in range(60):
        loss = sequence_loss(model(data.src, model.shift_right(data.tgt), mask), data.tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    scores = evaluate_transformer(model.eval(), data)
    assert scores["token_acc"] > 0.3  # chance over the 11 digits/hyphen is about 0.1
