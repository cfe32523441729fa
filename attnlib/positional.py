"""Positional information: fixed sinusoids (notebook 06), learned embeddings (06) and rotary embeddings (12).

Every function and module here takes ``d_model`` (or ``head_dim``) first, then ``max_len``.
The first two are added to the token embeddings; rotary embeddings instead rotate the queries and
keys inside attention (``MultiHeadAttention(..., rotary=RotaryEmbedding(d_k))``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import check_tensor, shape_of


def sinusoidal_encoding(d_model: int, max_len: int, base: float = 10000.0) -> torch.Tensor:
    """The ``(max_len, d_model)`` table of Vaswani et al. (built in notebook 06, section 2).

    ``PE[p, 2i] = sin(p / base^(2i/d_model))`` and ``PE[p, 2i+1] = cos(p / base^(2i/d_model))``:
    sin on the even dimensions, cos on the odd ones.
    """
    if max_len < 1 or d_model < 1:
        raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (ceil(d/2),)
    freq = torch.exp(-math.log(base) * two_i / d_model)  # 1 / base^(2i/d)
    angles = position * freq  # (max_len, ceil(d/2))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def _check_input(x: torch.Tensor, d_model: int, max_len: int, what: str) -> None:
    check_tensor("x", x, ndim=3)
    if x.shape[-1] != d_model:
        raise ValueError(f"x has shape {shape_of(x)} but its last dimension must be d_model={d_model}")
    if x.shape[1] > max_len:
        raise ValueError(
            f"x has length {x.shape[1]} (shape {shape_of(x)}) but this {what} only has max_len={max_len} positions"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``x (B, L, d_model)``; no parameters."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(d_model, max_len), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len, "sinusoidal encoding")
        return self.dropout(x + self.pe[: x.shape[1]])  # (B, L, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned vector per position to ``x (B, L, d_model)``.

    It has ``max_len * d_model`` parameters and knows nothing beyond ``max_len``:
    a longer input raises ValueError, because no vector was ever trained for it.
    """

    def __init__(self, d_model: int, max_len: int, dropout: float = 0.0):
        super().__init__()
        if max_len < 1 or d_model < 1:
            raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d_model, self.max_len, "learned embedding")
        positions = torch.arange(x.shape[1], device=x.device)
        return self.dropout(x + self.embedding(positions))  # (B, L, d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, max_len={self.max_len}"


class RotaryEmbedding(nn.Module):
    """Rotary position embeddings (RoPE, Su et al., 2021): rotate pairs of dimensions of queries and keys.

    Notebook 06 showed that the sinusoidal table turns an offset of k positions into a fixed
    block-diagonal rotation; RoPE uses that rotation directly (built in notebook 12). Each pair of
    dimensions of a query or key at position p turns by the angle ``p * w_i``,
    ``w_i = base^(-2i / head_dim)``. Since ``R(a)ᵀ R(b) = R(b - a)``, the score of a query at
    position m and a key at position n depends on the offset n - m only.

    Args:
        head_dim: the size of the last dimension of the queries and keys; must be even.
        base: sets the slowest frequency (10000 in the paper; SmolLM2 uses 100000).
        interleaved: which dimensions form pair i. True: ``(2i, 2i + 1)``, adjacent dimensions, as
            in the paper, notebooks 06 and 12 and llama.cpp (GGUF files). False: ``(i, i + head_dim/2)``,
            the "rotate half" layout of GPT-NeoX and Hugging Face's Llama. Same idea, other layout:
            weights trained for one layout give wrong scores in the other unless their rows are
            permuted (notebook 13).

    ``forward(x (..., L, head_dim), positions (L,) or None)`` returns ``x`` rotated, same shape.
    ``positions`` defaults to ``0, 1, ..., L-1``; pass ``arange(start, start + L)`` for tokens
    that come after ``start`` cached ones. No parameters: nothing to learn, nothing to run out of.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, interleaved: bool = True):
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
            raise ValueError(f"head_dim must be a positive even int (dimensions are rotated in pairs), got {head_dim!r}")
        if not base > 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        self.head_dim, self.base, self.interleaved = head_dim, float(base), bool(interleaved)
        i = torch.arange(head_dim // 2, dtype=torch.float64)
        self.register_buffer("inv_freq", self.base ** (-2 * i / head_dim), persistent=False)  # (head_dim/2,)

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        """``(L,)`` positions -> ``(L, head_dim/2)`` angles ``p * w_i`` (float64)."""
        return positions.to(torch.float64)[:, None] * self.inv_freq.to(positions.device)[None, :]

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        check_tensor("x", x, min_dim=2)
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x has shape {shape_of(x)} but its last dimension must be head_dim={self.head_dim}")
        L = x.shape[-2]
        if positions is None:
            positions = torch.arange(L, device=x.device)
        check_tensor("positions", positions, ndim=1)
        if positions.shape[0] != L:
            raise ValueError(
                f"positions has shape {shape_of(positions)} but x has shape {shape_of(x)}; "
                f"expected one position per token, shape ({L},)"
            )
        theta = self.angles(positions)  # (L, head_dim/2)
        cos, sin = theta.cos().to(x.dtype), theta.sin().to(x.dtype)
        if self.interleaved:  # pair i is (2i, 2i + 1)
            a, b = x[..., 0::2], x[..., 1::2]  # (..., L, head_dim/2) each
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)  # pairs back in place
        a, b = x.chunk(2, dim=-1)  # pair i is (i, i + head_dim/2)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., L, head_dim)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}, interleaved={self.interleaved}"
