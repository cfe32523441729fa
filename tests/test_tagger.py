"""Tests of attnlib/tagger.py: shapes, errors, save/load, masks and permutation equivariance."""
import math

import pytest
import torch
from torch import nn

from attnlib import TaggerConfig, TransformerTagger, padding_mask


def make(seed: int = 0, **overrides) -> TransformerTagger:
    torch.manual_seed(seed)
    config = dict(vocab_size=11, num_outputs=7, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=16)
    config.update(overrides)
    return TransformerTagger(TaggerConfig(**config)).eval()


def tokens(B: int = 3, L: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (B, L), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "none"])
def test_logits_and_attention_shapes(positions):
    model = make(positions=positions)
    x = tokens(B=3, L=9)
    logits = model(x)
    assert logits.shape == (3, 9, 7)
    logits2, maps = model(x, return_attention=True)
    assert torch.allclose(logits, logits2, atol=1e-6)  # the fused and the teaching path agree
    assert len(maps) == 2
    for w in maps:
        assert w.shape == (3, 4, 9, 9)
        assert torch.allclose(w.sum(-1), torch.ones(3, 4, 9), atol=1e-5)


def test_int32_tokens_are_accepted_and_give_the_same_logits():
    model, x = make(), tokens()
    assert torch.allclose(model(x), model(x.int()), atol=1e-6)


def test_the_full_max_len_is_accepted():
    model = make(positions="learned", max_len=16)
    assert model(tokens(L=16)).shape == (3, 16, 7)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.zeros(2, 3, 4, dtype=torch.long), r"tokens must be 2-D, but it has shape \(2, 3, 4\)"),
        (torch.zeros(5, dtype=torch.long), r"tokens must be 2-D, but it has shape \(5,\)"),
        (torch.zeros(2, 5), r"integer ids of shape \(B, L\), got dtype torch.float32"),
        (torch.zeros(2, 17, dtype=torch.long), r"tokens has shape \(2, 17\) but max_len is 16"),
        ([[1, 2, 3]], r"tokens must be a torch.Tensor, got list"),
    ],
)
def test_bad_tokens_raise_a_clear_value_error(bad, message):
    with pytest.raises(ValueError, match=message):
        make()(bad)


def test_unknown_positions_raise():
    with pytest.raises(ValueError, match=r"positions must be one of .*got 'rotary'"):
        make(positions="rotary")


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="d_model must be divisible by num_heads"):
        make(d_model=30, num_heads=4)


def test_a_mask_of_the_wrong_shape_raises():
    with pytest.raises(ValueError, match=r"mask has shape \(3, 5\) but it must be a 2-D \(Lq, Lk\) = \(9, 9\)"):
        make()(tokens(B=3, L=9), mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"a 3-D mask is ambiguous here"):
        make()(tokens(B=4, L=9), mask=torch.ones(4, 9, 9, dtype=torch.bool))  # B == heads: read as per-head before


def test_parameter_count_matches_the_architecture():
    d, ff, v, out, L, layers = 32, 64, 11, 7, 16, 2
    per_block = 4 * (d * d + d) + (d * ff + ff) + (ff * d + d) + 2 * 2 * d  # attention, FFN, two LayerNorms
    base = v * d + layers * per_block + d * out + out
    count = lambda m: sum(p.numel() for p in m.parameters())
    assert count(make(positions="sinusoidal")) == base  # the sinusoidal table is a buffer
    assert count(make(positions="none")) == base
    assert count(make(positions="learned")) == base + L * d


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = make(positions="none", num_layers=0)
    x = tokens()
    expected = model.head(model.embed(x) * math.sqrt(32))
    assert torch.allclose(model(x), expected, atol=1e-6)


def test_scaled_embeddings_are_on_the_scale_of_the_positions():
    model = make(d_model=64, vocab_size=200)
    scaled = model.embed.weight * math.sqrt(64)  # what forward adds the positions to
    assert 0.8 < scaled.std().item() < 1.2  # sinusoids are in [-1, 1]; a std of 8 would drown them


def test_save_and_load_round_trip(tmp_path):
    model = make(positions="learned", activation="gelu", norm_first=True)
    model.train()  # load must hand back a model in eval mode whatever state it was saved in
    path = tmp_path / "tagger.pt"
    model.save(path, vocab=list("0123456789_"), accuracy=0.97)
    loaded, extra = TransformerTagger.load(path)
    assert extra == {"vocab": list("0123456789_"), "accuracy": 0.97}
    assert loaded.config == model.config
    assert not loaded.training
    x = tokens()
    model.eval()
    assert torch.equal(model(x), loaded(x))
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_load_without_extra_gives_an_empty_dict(tmp_path):
    path = tmp_path / "plain.pt"
    make().save(path)
    _, extra = TransformerTagger.load(path)
    assert extra == {}


def test_without_positions_the_model_is_permutation_equivariant():
    model = make(positions="none")
    x = tokens(B=2, L=10)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(3))
    out, maps = model(x, return_attention=True)
    out_p, maps_p = model(x[:, perm], return_attention=True)
    assert torch.allclose(out_p, out[:, perm], atol=1e-5)  # shuffle in = shuffle out
    for w, w_p in zip(maps, maps_p):  # the maps permute along both axes
        assert torch.allclose(w_p, w[:, :, perm][:, :, :, perm], atol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_with_positions_the_model_is_not_permutation_equivariant(positions):
    model = make(positions=positions)
    x = tokens(B=2, L=10)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(3))
    gap = (model(x[:, perm]) - model(x)[:, perm]).abs().max().item()
    assert gap > 1e-2


def test_padding_mask_hides_the_padded_tokens():
    model = make()
    x = tokens(B=2, L=10)
    lengths = [6, 10]
    mask = padding_mask(lengths, 10)[:, None, None, :]  # (B, 1, 1, L)
    y = x.clone()
    y[0, 6:] = (y[0, 6:] + 5) % 11  # change only the padding of sequence 0
    a, b = model(x, mask), model(y, mask)
    assert torch.allclose(a[0, :6], b[0, :6], atol=1e-5)  # real tokens do not see the padding
    assert torch.allclose(a[1], b[1], atol=1e-6)
    assert not torch.allclose(model(x)[0, :6], model(y)[0, :6], atol=1e-3)  # without the mask they do
    _, maps = model(x, mask, return_attention=True)
    assert torch.all(maps[0][0, :, :, 6:] == 0)
    by_argument = model(x, key_padding_mask=padding_mask(lengths, 10))  # the same, with padding as padding
    torch.testing.assert_close(by_argument, a, atol=1e-6, rtol=0)


def test_a_few_steps_of_training_fit_a_fixed_batch():
    torch.manual_seed(0)
    model = make().train()
    x = tokens(B=16, L=8)
    y = x.flip(1) % 7  # reversal, folded into the 7 outputs
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 7), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
