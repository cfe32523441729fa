"""Positional information: fixed sinusoids and learned embeddings.

Both modules take ``(d_model, max_len)`` in that order. ``LearnedPositionalEmbedding``
(``max_len`` first) is the old name of :class:`LearnedPositionalEncoding`; it still works
and warns.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ._checks import check_tensor, shape_of


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The ``(max_len, d_model)`` table of Vaswani et al.

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
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

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


class LearnedPositionalEmbedding(LearnedPositionalEncoding):
    """Deprecated: ``LearnedPositionalEncoding(d_model, max_len)`` is the same module with the
    arguments in the order of :class:`SinusoidalPositionalEncoding`. This old name keeps its old
    order ``(max_len, d_model)``, so existing calls keep their meaning, and warns."""

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0):
        warnings.warn(
            "LearnedPositionalEmbedding(max_len, d_model) is deprecated; use "
            "LearnedPositionalEncoding(d_model, max_len), whose arguments come in the order of "
            "SinusoidalPositionalEncoding(d_model, max_len)",
            DeprecationWarning, stacklevel=2,
        )
        super().__init__(d_model, max_len, dropout)
