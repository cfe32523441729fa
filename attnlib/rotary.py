"""Rotary position embeddings (RoPE, Su et al., 2021): positions as rotations of queries and keys.

Notebook 06 showed that the sinusoidal table turns an offset of k positions into one fixed
block-diagonal rotation ``M_k``. RoPE uses that rotation directly: it rotates each pair of
dimensions ``(2i, 2i+1)`` of a query or key at position p by the angle ``p * w_i``, with
``w_i = base^(-2i / head_dim)``. Since ``R(a)ᵀ R(b) = R(b - a)``, the score of a query at position
m and a key at position n is ``q · R((n - m) w) k``: it depends on the offset n - m only.

Pairs are adjacent dimensions, as in notebook 06 and the RoPE paper. (Some libraries, e.g. the
GPT-NeoX / Llama code, pair dimension i with i + head_dim/2 instead: same idea, other layout,
so their weights do not load into this layout unchanged.)
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_tensor, shape_of


class RotaryEmbedding(nn.Module):
    """Rotate pairs of dimensions of ``x`` by angles proportional to each token's position.

    Args:
        head_dim: the size of the last dimension of the queries and keys; must be even.
        base: sets the slowest frequency, ``w_i = base^(-2i / head_dim)``.

    ``forward(x (..., L, head_dim), positions (L,) or None)`` returns ``x`` rotated, same shape.
    ``positions`` defaults to ``0, 1, ..., L-1``; pass ``arange(start, start + L)`` for tokens
    that come after ``start`` cached ones. No parameters: nothing to learn, nothing to run out of.
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
            raise ValueError(f"head_dim must be a positive even int (dimensions are rotated in pairs), got {head_dim!r}")
        if not base > 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        self.head_dim, self.base = head_dim, float(base)
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
        even, odd = x[..., 0::2], x[..., 1::2]  # (..., L, head_dim/2) each: the two halves of every pair
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (..., L, head_dim/2, 2)
        return rotated.flatten(-2)  # (..., L, head_dim), pairs back in place

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base:g}"
