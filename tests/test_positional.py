"""Tests of attnlib/positional.py: the sinusoidal table computed independently, relative
offsets as rotations, and the two modules that add positions to token vectors."""
import math
import warnings

import pytest
import torch

from attnlib import (LearnedPositionalEmbedding, LearnedPositionalEncoding, MultiHeadAttention,
                     SinusoidalPositionalEncoding, TaggerConfig, TransformerTagger, sinusoidal_encoding)

ATOL = 1e-5


def reference_table(max_len, d_model, base=10000.0):
    """The formula of Vaswani et al., one entry at a time, in float64 Python math."""
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    for p in range(max_len):
        for j in range(d_model):
            angle = p / base ** ((j - j % 2) / d_model)  # dims 2i and 2i+1 share a frequency
            table[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


@pytest.mark.parametrize("max_len, d_model", [(10, 8), (50, 16), (7, 5), (3, 1)])
def test_table_equals_the_formula(max_len, d_model):
    pe = sinusoidal_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), reference_table(max_len, d_model), atol=ATOL, rtol=0)


def test_spot_values():
    pe = sinusoidal_encoding(101, 512)
    assert pe[0, 0::2].abs().max() == 0 and (pe[0, 1::2] == 1).all()  # position 0: sin 0 = 0, cos 0 = 1
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=ATOL)
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0), abs=ATOL)
    assert pe[100, 0].item() == pytest.approx(math.sin(100.0), abs=ATOL)
    assert pe[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 512)), abs=ATOL)
    assert pe[3, 511].item() == pytest.approx(math.cos(3 / 10000 ** (510 / 512)), abs=ATOL)
    assert pe.abs().max() <= 1.0


def test_base_changes_the_frequencies():
    torch.testing.assert_close(sinusoidal_encoding(20, 6, base=100.0).double(), reference_table(20, 6, 100.0), atol=ATOL, rtol=0)
    assert not torch.allclose(sinusoidal_encoding(20, 6, base=100.0), sinusoidal_encoding(20, 6))


def test_odd_d_model_ends_with_a_sine():
    pe = sinusoidal_encoding(9, 5)
    torch.testing.assert_close(pe[:, 4].double(), torch.sin(torch.arange(9.0, dtype=torch.float64) / 10000 ** (4 / 5)), atol=ATOL, rtol=0)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_offset_is_a_fixed_rotation(k):
    """PE(p + k) = M_k PE(p) for every p, with M_k block-diagonal 2x2 rotations that depend only on k."""
    d = 16
    pe = sinusoidal_encoding(200, d).double()
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(0, d, 2):
        b = k / 10000 ** (i / d)
        M[i : i + 2, i : i + 2] = torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]])
    torch.testing.assert_close(pe[:-k] @ M.T, pe[k:], atol=ATOL, rtol=0)
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))  # a rotation: norms are kept


def test_nearby_positions_are_more_similar_than_distant_ones():
    pe = sinusoidal_encoding(100, 64)
    cos = torch.nn.functional.cosine_similarity
    near, far = cos(pe[50], pe[51], dim=0), cos(pe[50], pe[90], dim=0)
    assert near > far


def test_sinusoidal_module_adds_the_table_and_has_no_parameters():
    enc = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.randn(3, 6, 8)
    torch.testing.assert_close(enc(x), x + sinusoidal_encoding(6, 8))
    assert sum(p.numel() for p in enc.parameters()) == 0
    assert "pe" not in enc.state_dict()  # the table is rebuilt, not saved


def test_learned_module_adds_its_embedding_and_counts_parameters():
    emb = LearnedPositionalEncoding(8, 10)  # (d_model, max_len), as SinusoidalPositionalEncoding
    x = torch.randn(3, 6, 8)
    torch.testing.assert_close(emb(x), x + emb.embedding.weight[:6])
    assert sum(p.numel() for p in emb.parameters()) == 10 * 8
    emb(x).sum().backward()
    assert (emb.embedding.weight.grad[:6] != 0).any() and (emb.embedding.weight.grad[6:] == 0).all()


def test_dropout_only_in_training():
    enc = SinusoidalPositionalEncoding(8, max_len=20, dropout=0.5)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(enc.eval()(x), x + sinusoidal_encoding(6, 8))
    torch.manual_seed(0)
    assert (enc.train()(x) == 0).any()


def test_positions_break_permutation_equivariance():
    torch.manual_seed(0)
    mha, enc = MultiHeadAttention(16, 2).eval(), SinusoidalPositionalEncoding(16, max_len=10)
    x = torch.randn(1, 5, 16)
    perm = torch.tensor([4, 2, 0, 1, 3])

    def layer(x, positions):
        h = enc(x) if positions else x
        return mha(h, h, h)[0]

    torch.testing.assert_close(layer(x[:, perm], False), layer(x, False)[:, perm], atol=ATOL, rtol=0)
    assert (layer(x[:, perm], True) - layer(x, True)[:, perm]).norm() > 1e-2


def test_too_long_input_raises():
    with pytest.raises(ValueError, match=r"x has length 11 \(shape \(2, 11, 8\)\) but this learned embedding only has max_len=10"):
        LearnedPositionalEncoding(8, 10)(torch.zeros(2, 11, 8))
    with pytest.raises(ValueError, match=r"x has length 6 .* sinusoidal encoding only has max_len=5"):
        SinusoidalPositionalEncoding(8, max_len=5)(torch.zeros(1, 6, 8))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"x has shape \(2, 3, 4\) but its last dimension must be d_model=8"):
        SinusoidalPositionalEncoding(8)(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"x must be 3-D, but it has shape \(3, 8\)"):
        LearnedPositionalEncoding(8, 10)(torch.zeros(3, 8))
    with pytest.raises(ValueError, match="max_len and d_model must be positive, got max_len=0, d_model=4"):
        sinusoidal_encoding(0, 4)


def test_both_modules_take_d_model_then_max_len():
    sin, learned = SinusoidalPositionalEncoding(8, 10), LearnedPositionalEncoding(8, 10)
    assert (sin.d_model, sin.max_len) == (learned.d_model, learned.max_len) == (8, 10)
    assert learned.embedding.weight.shape == (10, 8)
    assert "d_model=8, max_len=10" in repr(sin) and "d_model=8, max_len=10" in repr(learned)


def test_the_old_name_keeps_its_old_order_and_warns():
    """Swapping the old class's arguments would silently turn (12, 64) into 64 positions of width 12."""
    with pytest.warns(DeprecationWarning, match=r"use LearnedPositionalEncoding\(d_model, max_len\)"):
        old = LearnedPositionalEmbedding(12, 64)  # (max_len, d_model), as notebook 06 calls it
    assert (old.max_len, old.d_model) == (12, 64) and old.embedding.weight.shape == (12, 64)
    assert isinstance(old, LearnedPositionalEncoding)
    new = LearnedPositionalEncoding(64, 12)
    new.load_state_dict(old.state_dict())  # the same parameters under the same names
    x = torch.randn(2, 7, 64)
    torch.testing.assert_close(new(x), old(x))


def test_the_tagger_uses_the_new_name_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = TransformerTagger(TaggerConfig(vocab_size=5, num_outputs=3, d_model=8, num_heads=2, max_len=6,
                                               positions="learned"))
    assert type(model.pos) is LearnedPositionalEncoding and model.pos.embedding.weight.shape == (6, 8)
