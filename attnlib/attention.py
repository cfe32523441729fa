"""Scaled dot-product attention, written out step by step and through PyTorch's fused kernel, the package's one
masked softmax, and the masks.

Masks are boolean and **True means "may attend"**, the same convention as the boolean
``attn_mask`` of ``torch.nn.functional.scaled_dot_product_attention``. (Beware: the
boolean masks of ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` use the
opposite polarity, True = "blocked".)

A mask must say what it means by its shape: either 2-D ``(Lq, Lk)``, shared by every batch
entry and head, or the full rank of the scores with size-1 dimensions where it is shared
(``(B, 1, Lk)`` for 3-D scores, ``(B, 1, 1, Lk)`` for 4-D ones). Other ranks are refused,
because broadcasting would add dimensions on the left and a ``(B, Lk)`` padding mask would
be read as ``(Lq, Lk)``.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from ._checks import check_attention_mask, check_bool_mask, check_qkv, check_tensor, shape_of


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dimension of ``scores`` where ``mask`` is True, exactly 0 where it is False.

    ``mask`` is bool with the rank of ``scores`` (size 1 in a dimension it shares), or None
    for a plain softmax. A row with no True entry gets weights of zero, never NaN (a plain
    softmax over a row of ``-inf`` is NaN), and no gradient flows through it.
    """
    if mask is None:
        return torch.softmax(scores, dim=-1)
    check_bool_mask(mask, shape_of(scores), "the shape of the scores")
    scores = scores.masked_fill(~mask, float("-inf"))
    # A row with no allowed key would be softmax([-inf, ..., -inf]) = NaN.
    # Give such rows finite scores here and zero their weights below.
    scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)  # each row sums to 1 (or is all 0)


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
        mask: optional bool tensor, True = the query may attend to that key: either
            ``(Lq, Lk)`` or of the rank of the scores ``(..., Lq, Lk)`` with size 1 where
            shared, e.g. ``padding_mask(lengths, Lk)[:, None, :]`` for 3-D scores.
        dropout_p: probability of zeroing each weight before the weights mix the values.
            It is applied whenever ``dropout_p > 0``, in training or not: this function
            has no mode. Modules pass it only in training (MultiHeadAttention passes its
            dropout when ``self.training`` and 0 otherwise). The *returned* weights are
            the ones before dropout.

    Returns:
        ``(output, weights)`` with shapes ``(..., Lq, d_v)`` and ``(..., Lq, Lk)``.

    A query row whose keys are **all** masked gets weights of zero and an output of
    zero, never NaN. (A plain softmax over a row of ``-inf`` returns NaN.)
    """
    check_tensor("q", q, min_dim=2)
    check_tensor("k", k, min_dim=2)
    check_tensor("v", v, min_dim=2)
    batch = check_qkv(q, k, v)  # the broadcast batch dimensions of q, k and v

    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1)  # (..., Lq, Lk)
    scores = scores / math.sqrt(d_k)  # keep the variance near 1 whatever d_k is
    scores = scores.expand(*batch, q.shape[-2], k.shape[-2])  # v's batch dimensions may be larger

    if mask is not None:
        names = ("B", "h") if len(batch) == 2 else tuple(f"n{i}" for i in range(len(batch)))
        names = ("B",) if len(batch) == 1 else names
        check_attention_mask(mask, (*batch, q.shape[-2], k.shape[-2]), (*names, "Lq", "Lk"))
        if mask.dim() < scores.dim():  # a 2-D (Lq, Lk) mask: shared by every batch entry
            mask = mask[(None,) * (scores.dim() - 2)]  # (1, ..., 1, Lq, Lk)
    weights = masked_softmax(scores, mask)  # (..., Lq, Lk), each row sums to 1 (or is all 0)

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
    ``padding_mask(lengths, L)[:, None, :]`` for 3-D scores ``(B, Lq, Lk)`` and
    ``[:, None, None, :]`` for ``(B, heads, Lq, Lk)``; or pass it unchanged as
    ``key_padding_mask`` to MultiHeadAttention, the blocks and the tagger. Passed as a
    plain 2-D ``mask`` it would be read as ``(Lq, Lk)``.
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


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, dropout_p: float = 0.0,
    is_causal: bool = False,
) -> torch.Tensor:
    """The output of :func:`scaled_dot_product_attention` (no weights), from PyTorch's fused kernel.

    Same shapes and mask convention (bool, True = may attend); the ``(Lq, Lk)`` weights are never
    stored, so memory stays O(L) instead of O(L^2). ``k`` and ``v`` may have fewer heads than ``q``
    (``(B, g, Lk, d)`` against ``(B, h, Lq, d)``, h a multiple of g): query head i then reads key/value
    head ``i // (h // g)`` (grouped-query attention). ``is_causal=True`` (with no mask) is the causal
    mask without building it. Inputs are not re-checked here: ``MultiHeadAttention(need_weights=False)``
    checks them and calls this.
    """
    gqa = q.dim() == 4 and k.shape[1] != q.shape[1]
    extra = {"enable_gqa": True} if gqa else {}
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=is_causal, **extra)
    row_has_key = mask.any(dim=-1, keepdim=True)
    if row_has_key.all():  # the usual case (causal, padding): every query has a key
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, **extra)
    # Some PyTorch versions return NaN for a query with no allowed key; let such rows
    # see every key, then zero them, to match the teaching version.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p, **extra)
    return out.masked_fill(~row_has_key, 0.0)
