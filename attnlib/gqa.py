"""Grouped-query attention: h query heads share g key/value heads (g = h: multi-head; g = 1: multi-query).

Only the keys and values are shared, so a decoder's KV cache shrinks by h / g, while every query
head still asks its own question. Query head i reads key/value head ``i // (h // g)``: consecutive
query heads form a group, the layout of ``F.scaled_dot_product_attention(..., enable_gqa=True)``.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_attention_mask, check_key_padding_mask, check_tensor, shape_of
from .attention import scaled_dot_product_attention
from .multihead import combine_masks, fused_attention
from .rotary import RotaryEmbedding

KVCache = tuple[torch.Tensor, torch.Tensor]


class GroupedQueryAttention(nn.Module):
    """Batch-first attention with ``num_heads`` query heads and ``num_kv_heads`` key/value heads.

    Args:
        d_model: model width; must be divisible by ``num_heads``; ``d_k = d_model // num_heads``.
        num_heads: number of query heads h.
        num_kv_heads: number of key/value heads g; h must be a multiple of g.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have a bias.
        rotary: if True, queries and keys are rotated by a ``RotaryEmbedding(d_k)`` (RoPE).

    ``w_q`` and ``w_o`` map d_model to d_model; ``w_k`` and ``w_v`` map d_model to ``g * d_k``. With
    g = h (and rotary=False) the parameter names and shapes are those of ``MultiHeadAttention``,
    so its state_dict loads and the outputs are equal.

    ``forward(query (B, Lq, d_model), key (B, Lk, d_model), value (B, Lk, d_model), mask=None,
    need_weights=True)`` returns ``(out (B, Lq, d_model), weights (B, h, Lq, Lk) or None)``; the
    mask is bool (True = may attend) and broadcasts to ``(B, h, Lq, Lk)``.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, dropout: float = 0.0, bias: bool = True,
                 rotary: bool = False):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads}"
            )
        if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(
                f"num_heads must be a multiple of num_kv_heads, got num_heads={num_heads} and "
                f"num_kv_heads={num_kv_heads}"
            )
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.group = num_heads // num_kv_heads  # query heads per key/value head
        self.dropout_p = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.rotary = RotaryEmbedding(self.d_k) if rotary else None

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, heads, self.d_k).transpose(1, 2)  # (B, heads, L, d_k)

    def _check(self, name: str, x: object) -> None:
        check_tensor(name, x, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"{name} has shape {shape_of(x)} but its last dimension must be d_model={self.d_model}")

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
               need_weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Heads already split: q ``(B, h, Lq, d_k)``, k and v ``(B, g, Lk, d_k)`` -> ``(B, Lq, d_model)``, weights."""
        k = k.repeat_interleave(self.group, dim=1)  # (B, h, Lk, d_k): kv head i // group serves query head i
        v = v.repeat_interleave(self.group, dim=1)  # (B, h, Lk, d_k)
        p = self.dropout_p if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        else:
            heads, weights = fused_attention(q, k, v, mask, dropout_p=p), None
        B, h, Lq, d_k = heads.shape
        return self.w_o(heads.transpose(1, 2).reshape(B, Lq, h * d_k)), weights  # (B, Lq, d_model)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        for name, x in (("query", query), ("key", key), ("value", value)):
            self._check(name, x)
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query {shape_of(query)}, key {shape_of(key)} and value {shape_of(value)} must share the batch "
                "size, and key and value the length"
            )
        if mask is not None:
            target = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            check_attention_mask(mask, target, ("B", "h", "Lq", "Lk"), padding_arg="key_padding_mask")
        if key_padding_mask is not None:  # (B, Lk), True = a real token, as in MultiHeadAttention
            check_key_padding_mask(key_padding_mask, key.shape[0], key.shape[1])
        mask = combine_masks(mask, key_padding_mask)
        q = self._split(self.w_q(query), self.num_heads)  # (B, h, Lq, d_k)
        k = self._split(self.w_k(key), self.num_kv_heads)  # (B, g, Lk, d_k)
        v = self._split(self.w_v(value), self.num_kv_heads)  # (B, g, Lk, d_k)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        return self.attend(q, k, v, mask, need_weights)

    def forward_with_cache(self, x: torch.Tensor, cache: KVCache | None = None) -> tuple[torch.Tensor, KVCache]:
        """Causal self-attention for new tokens ``x (B, T, d_model)`` after the cached ones.

        ``cache`` is ``(k, v)``, each ``(B, g, T_past, d_k)``, or None. Returns the output
        ``(B, T, d_model)`` and the grown cache ``(B, g, T_past + T, d_k)``: only g heads are stored.
        """
        self._check("x", x)
        past = 0 if cache is None else cache[0].shape[2]
        if cache is not None and (cache[0].shape != cache[1].shape or cache[0].shape[0] != x.shape[0]
                                  or cache[0].shape[1] != self.num_kv_heads or cache[0].shape[3] != self.d_k):
            raise ValueError(
                f"cache holds k {shape_of(cache[0])} and v {shape_of(cache[1])}; expected both "
                f"({x.shape[0]}, {self.num_kv_heads}, T_past, {self.d_k})"
            )
        T = x.shape[1]
        q = self._split(self.w_q(x), self.num_heads)  # (B, h, T, d_k)
        k = self._split(self.w_k(x), self.num_kv_heads)  # (B, g, T, d_k)
        v = self._split(self.w_v(x), self.num_kv_heads)  # (B, g, T, d_k)
        if self.rotary is not None:
            positions = torch.arange(past, past + T, device=x.device)  # the new tokens' absolute positions
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        if cache is not None:
            k, v = torch.cat((cache[0], k), dim=2), torch.cat((cache[1], v), dim=2)  # (B, g, T_past + T, d_k)
        mask = torch.arange(past, past + T, device=x.device)[:, None] >= torch.arange(past + T, device=x.device)
        out, _ = self.attend(q, k, v, mask, need_weights=False)
        return out, (k, v)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"d_k={self.d_k}, dropout={self.dropout_p}")
