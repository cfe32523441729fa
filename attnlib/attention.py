"""Scaled dot-product attention, written out step by step, and the two masks.

Masks are boolean and **True means "may attend"**, the same convention as the boolean
``attn_mask`` of ``torch.nn.functional.scaled_dot_product_attention``. (Beware: the
boolean masks of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` use the
opposite polarity, True = "blocked".)
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from ._checks import check_bool_mask, check_tensor, shape_of


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ / √d_k) v, one visible step at a time.

    Args:
        q: queries, shape ``(..., Lq, d_k)``.
        k: keys, shape ``(..., Lk, d_k)``.
        v: values, shape ``(..., Lk, d_v)``.
        mask: optional bool tensor that broadcasts to ``(..., Lq, Lk)``;
            True = the query may attend to that key.
        dropout_p: dropout on the weights before they mix the values (training only;
            the *returned* weights are the ones before dropout).

    Returns:
        ``(output, weights)`` with shapes ``(..., Lq, d_v)`` and ``(..., Lq, Lk)``.

    A query row whose keys are **all** masked gets weights of zero and an output of
    zero, never NaN. (A plain softmax over a row of ``-inf`` returns NaN.)
    """
    check_tensor("q", q, min_dim=2)
    check_tensor("k", k, min_dim=2)
    check_tensor("v", v, min_dim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"query has shape {shape_of(q)} but key has shape {shape_of(k)}; the last dimensions must match"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"key has shape {shape_of(k)} but value has shape {shape_of(v)}; "
            "they must have the same length (dimension -2)"
        )
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q {shape_of(q)}, k {shape_of(k)} and v {shape_of(v)} "
            "do not broadcast together"
        ) from None

    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., Lq, Lk)
    scores = scores / math.sqrt(d_k)  # keep the variance near 1 whatever d_k is

    if mask is not None:
        target = (*batch, q.shape[-2], k.shape[-2])
        check_bool_mask(mask, target, "(..., Lq, Lk)")
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax([-inf, ..., -inf]) = NaN.
        # Give such rows finite scores here and zero their weights below.
        row_has_key = mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(~row_has_key, 0.0)

    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # fully masked rows become all zeros

    mixed = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    output = mixed @ v  # (..., Lq, d_v)
    return output, weights


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """An ``(n, n)`` bool mask, True on and below the diagonal: token i may see tokens 0..i."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"causal_mask needs a positive int size, got {n!r}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(
    lengths: Sequence[int] | torch.Tensor, max_len: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """A ``(B, max_len)`` bool mask, True for the real tokens of each sequence.

    To use it as an attention mask over keys, add the query dimensions:
    ``padding_mask(lengths, L)[:, None, :]`` broadcasts to ``(B, Lq, Lk)`` and
    ``[:, None, None, :]`` to ``(B, heads, Lq, Lk)``.
    """
    lengths = torch.as_tensor(lengths, device=device)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {shape_of(lengths)}")
    if lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must hold integers, got dtype {lengths.dtype}")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(
            f"every length must be between 0 and max_len={max_len}, got {lengths.tolist()}"
        )
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def sliding_window_mask(n: int, window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """An ``(n, n)`` bool mask, True where ``0 <= i - j < window``: token i sees itself and the window - 1 before it.

    ``window >= n`` gives the causal mask. Each row has at most ``window`` True entries, so the
    mask has about ``n * window`` of them instead of the causal ``n (n + 1) / 2``.
    """
    for name, value in (("n", n), ("window", window)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"sliding_window_mask needs a positive int {name}, got {value!r}")
    offset = torch.arange(n, device=device)[:, None] - torch.arange(n, device=device)[None, :]  # (n, n): i - j
    return (offset >= 0) & (offset < window)
