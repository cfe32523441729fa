"""Tests of attnlib/positional.py: the sinusoidal table computed independently, relative offsets as
rotations, the two modules that add positions to token vectors, and rotary embeddings (both layouts)
against explicit rotation matrices."""
import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnlib import (LearnedPositionalEncoding, MultiHeadAttention, RotaryEmbedding, SinusoidalPositionalEncoding,
                     sinusoidal_encoding)

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
    pe = sinusoidal_encoding(d_model, max_len)
    assert pe.shape == (max_len, d_model) and pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), reference_table(max_len, d_model), atol=ATOL, rtol=0)


def test_spot_values():
    pe = sinusoidal_encoding(512, 101)
    assert pe[0, 0::2].abs().max() == 0 and (pe[0, 1::2] == 1).all()  # position 0: sin 0 = 0, cos 0 = 1
    assert pe[1, 0].item() == pytest.approx(math.sin(1.0), abs=ATOL)
    assert pe[1, 1].item() == pytest.approx(math.cos(1.0), abs=ATOL)
    assert pe[100, 0].item() == pytest.approx(math.sin(100.0), abs=ATOL)
    assert pe[3, 2].item() == pytest.approx(math.sin(3 / 10000 ** (2 / 512)), abs=ATOL)
    assert pe[3, 511].item() == pytest.approx(math.cos(3 / 10000 ** (510 / 512)), abs=ATOL)
    assert pe.abs().max() <= 1.0


def test_base_changes_the_frequencies():
    torch.testing.assert_close(sinusoidal_encoding(6, 20, base=100.0).double(), reference_table(20, 6, 100.0), atol=ATOL, rtol=0)
    assert not torch.allclose(sinusoidal_encoding(6, 20, base=100.0), sinusoidal_encoding(6, 20))


def test_odd_d_model_ends_with_a_sine():
    pe = sinusoidal_encoding(5, 9)
    torch.testing.assert_close(pe[:, 4].double(), torch.sin(torch.arange(9.0, dtype=torch.float64) / 10000 ** (4 / 5)), atol=ATOL, rtol=0)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_offset_is_a_fixed_rotation(k):
    """PE(p + k) = M_k PE(p) for every p, with M_k block-diagonal 2x2 rotations that depend only on k."""
    d = 16
    pe = sinusoidal_encoding(d, 200).double()
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(0, d, 2):
        b = k / 10000 ** (i / d)
        M[i : i + 2, i : i + 2] = torch.tensor([[math.cos(b), math.sin(b)], [-math.sin(b), math.cos(b)]])
    torch.testing.assert_close(pe[:-k] @ M.T, pe[k:], atol=ATOL, rtol=0)
    torch.testing.assert_close(M @ M.T, torch.eye(d, dtype=torch.float64))  # a rotation: norms are kept


def test_nearby_positions_are_more_similar_than_distant_ones():
    pe = sinusoidal_encoding(64, 100)
    cos = torch.nn.functional.cosine_similarity
    near, far = cos(pe[50], pe[51], dim=0), cos(pe[50], pe[90], dim=0)
    assert near > far


def test_sinusoidal_module_adds_the_table_and_has_no_parameters():
    enc = SinusoidalPositionalEncoding(8, max_len=20)
    x = torch.randn(3, 6, 8)
    torch.testing.assert_close(enc(x), x + sinusoidal_encoding(8, 6))
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
    torch.testing.assert_close(enc.eval()(x), x + sinusoidal_encoding(8, 6))
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
        sinusoidal_encoding(4, 0)


def test_both_modules_take_d_model_then_max_len():
    sin, learned = SinusoidalPositionalEncoding(8, 10), LearnedPositionalEncoding(8, 10)
    assert (sin.d_model, sin.max_len) == (learned.d_model, learned.max_len) == (8, 10)
    assert learned.embedding.weight.shape == (10, 8)
    assert "d_model=8, max_len=10" in repr(sin) and "d_model=8, max_len=10" in repr(learned)


# ---------------------------------------------------------------- rotary embeddings

FAST = settings(max_examples=40, deadline=None)


def rand64(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rotation_matrix(p: float, head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The (head_dim, head_dim) matrix that turns pair (2i, 2i+1) by p * base^(-2i/head_dim), built entry by entry."""
    R = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    for i in range(head_dim // 2):
        angle = p * base ** (-2 * i / head_dim)
        R[2 * i, 2 * i], R[2 * i, 2 * i + 1] = math.cos(angle), -math.sin(angle)
        R[2 * i + 1, 2 * i], R[2 * i + 1, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return R


@FAST
@given(half=st.integers(1, 16), L=st.integers(1, 20), base=st.sampled_from([10.0, 500.0, 10000.0]),
       start=st.integers(0, 1000), seed=st.integers(0, 999), batch=st.sampled_from([(), (3,), (2, 4)]))
def test_rotary_equals_an_explicit_rotation_matrix(half, L, base, start, seed, batch):
    d = 2 * half
    x = rand64(*batch, L, d, seed=seed)
    positions = torch.arange(start, start + L)
    out = RotaryEmbedding(d, base=base)(x, positions)
    expected = torch.stack([x[..., t, :] @ rotation_matrix(start + t, d, base).T for t in range(L)], dim=-2)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_rotary_default_positions_are_0_to_L_minus_1():
    rope, x = RotaryEmbedding(8), rand64(2, 6, 8, seed=1)
    torch.testing.assert_close(rope(x), rope(x, torch.arange(6)))
    torch.testing.assert_close(rope(x)[..., 0, :], x[..., 0, :])  # position 0 is no rotation


@FAST
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(-500, 5000), seed=st.integers(0, 999))
def test_rotary_score_depends_only_on_the_offset(m, n, shift, seed):
    if m + shift < 0 or n + shift < 0:
        shift = -min(m, n)
    rope = RotaryEmbedding(16)
    q, k = rand64(1, 16, seed=seed), rand64(1, 16, seed=seed + 1)
    score = (rope(q, torch.tensor([m])) * rope(k, torch.tensor([n]))).sum()
    shifted = (rope(q, torch.tensor([m + shift])) * rope(k, torch.tensor([n + shift]))).sum()
    torch.testing.assert_close(score, shifted, atol=1e-9, rtol=0)


def test_rotary_keeps_lengths_and_float32_works():
    x = rand64(3, 50, 32, seed=2).float()
    out = RotaryEmbedding(32)(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5, rtol=1e-5)


def test_rotary_has_no_parameters_and_nothing_in_the_state_dict():
    rope = RotaryEmbedding(8)
    assert sum(p.numel() for p in rope.parameters()) == 0 and len(rope.state_dict()) == 0


@pytest.mark.parametrize("make, message", [
    (lambda: RotaryEmbedding(7), "head_dim must be a positive even int .* got 7"),
    (lambda: RotaryEmbedding(0), "head_dim must be a positive even int .* got 0"),
    (lambda: RotaryEmbedding(8, base=1.0), "base must be a number > 1, got 1.0"),
    (lambda: RotaryEmbedding(8)(rand64(2, 5, 6)), r"x has shape \(2, 5, 6\) but its last dimension must be head_dim=8"),
    (lambda: RotaryEmbedding(8)(rand64(2, 5, 8), torch.arange(4)),
     r"positions has shape \(4,\) but x has shape \(2, 5, 8\); expected one position per token, shape \(5,\)"),
    (lambda: RotaryEmbedding(8)(rand64(5, 8), torch.arange(5)[None]), r"positions must be 1-D"),
])
def test_rotary_bad_inputs_name_expected_and_actual(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def rotate_half_reference(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The "rotate half" layout written as Hugging Face's Llama writes it: cat(-x2, x1) times sin, plus x cos."""
    d = x.shape[-1]
    inv = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions.double()[:, None] * inv[None, :]
    cos, sin = torch.cat([angle.cos(), angle.cos()], -1), torch.cat([angle.sin(), angle.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@FAST
@given(half=st.integers(1, 16), L=st.integers(1, 12), base=st.sampled_from([10000.0, 100000.0]),
       start=st.integers(0, 500), seed=st.integers(0, 999))
def test_rotate_half_layout_equals_the_reference_and_the_interleaved_one_after_a_permutation(half, L, base, start, seed):
    d = 2 * half
    x, positions = rand64(2, L, d, seed=seed), torch.arange(start, start + L)
    halves = RotaryEmbedding(d, base=base, interleaved=False)(x, positions)
    torch.testing.assert_close(halves, rotate_half_reference(x, positions, base), atol=1e-10, rtol=0)
    # pair i is (i, i + d/2) in one layout and (2i, 2i + 1) in the other: reorder the dimensions, same rotation
    order = torch.stack([torch.arange(half), torch.arange(half) + half], dim=-1).flatten()  # 0, h, 1, h+1, ...
    pairs = RotaryEmbedding(d, base=base, interleaved=True)(x[..., order], positions)
    torch.testing.assert_close(pairs, halves[..., order], atol=1e-10, rtol=0)
    if half > 1 and start + L > 1:  # without the reordering the two layouts disagree (position 0 is no rotation)
        assert not torch.allclose(RotaryEmbedding(d, base=base)(x, positions), halves)
