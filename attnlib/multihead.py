"""Multi-head attention: h small attentions side by side, then one output projection."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_bool_mask, check_tensor, shape_of
from .attention import scaled_dot_product_attention


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, dropout_p: float = 0.0
) -> torch.Tensor:
    """The output of ``scaled_dot_product_attention`` (no weights) from PyTorch's fused kernel.

    Same shapes and mask convention (bool, True = may attend); the ``(Lq, Lk)`` weight
    matrix is never stored, so memory stays O(L) instead of O(L^2). Used by
    ``MultiHeadAttention(..., need_weights=False)``; inputs are not re-checked here.
    """
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    row_has_key = mask.any(dim=-1, keepdim=True)
    if row_has_key.all():  # the usual case (causal, padding): every query has a key
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    # Some PyTorch versions return NaN for a query with no allowed key; let such rows
    # see every key, then zero them, to match the teaching version.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p)
    return out.masked_fill(~row_has_key, 0.0)


class MultiHeadAttention(nn.Module):
    """Batch-first multi-head attention with separate ``w_q, w_k, w_v, w_o`` projections.

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: number of heads h; each head works in ``d_k = d_model // h`` dimensions.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have a bias.

    ``forward(query (B, Lq, d_model), key (B, Lk, d_model), value (B, Lk, d_model),
    mask=None, need_weights=True)`` returns ``(out (B, Lq, d_model), weights)`` where
    ``weights`` is ``(B, h, Lq, Lk)``, or None when ``need_weights=False``. The mask is
    bool and broadcasts to ``(B, h, Lq, Lk)``; True = may attend. For a padding mask of
    shape ``(B, Lk)`` pass ``mask[:, None, None, :]``.

    With ``need_weights=False`` the heads go through PyTorch's fused
    ``F.scaled_dot_product_attention`` (same output, much less memory).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads} "
                f"(d_model % num_heads = {d_model % num_heads if num_heads > 0 else 'undefined'})"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout_p = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, h, L, d_k)."""
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, L, d_k)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h, L, d_k) -> (B, L, d_model). Transpose back *before* flattening the heads."""
        B, h, L, d_k = x.shape
        return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, d_model)

    def _check_inputs(self, query, key, value, mask):
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3)
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} has shape {shape_of(x)} but its last dimension must be d_model={self.d_model}"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key has shape {shape_of(key)} but value has shape {shape_of(value)}; "
                "batch size and length must match"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query has shape {shape_of(query)} but key has shape {shape_of(key)}; the batch sizes must match"
            )
        if mask is not None:
            target = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            check_bool_mask(mask, target, "(B, h, Lq, Lk)")

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._check_inputs(query, key, value, mask)
        q = self.split_heads(self.w_q(query))  # (B, h, Lq, d_k)
        k = self.split_heads(self.w_k(key))  # (B, h, Lk, d_k)
        v = self.split_heads(self.w_v(value))  # (B, h, Lk, d_k)
        p = self.dropout_p if self.training else 0.0

        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        else:
            heads, weights = fused_attention(q, k, v, mask, dropout_p=p), None
        return self.w_o(self.merge_heads(heads)), weights  # (B, Lq, d_model)

    @torch.no_grad()
    def copy_from_torch(self, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a batch-first ``nn.MultiheadAttention`` of the same size into this module."""
        if mha.embed_dim != self.d_model or mha.num_heads != self.num_heads:
            raise ValueError(
                f"nn.MultiheadAttention has embed_dim={mha.embed_dim}, num_heads={mha.num_heads}; "
                f"expected d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if mha.in_proj_weight is None:
            raise ValueError("nn.MultiheadAttention with separate kdim/vdim is not supported")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
        theirs, ours = mha.in_proj_bias is not None, self.w_q.bias is not None
        if theirs != ours:  # copying would succeed but the outputs would differ
            raise ValueError(f"nn.MultiheadAttention has bias={theirs} but this module has bias={ours}")
        wq, wk, wv = mha.in_proj_weight.chunk(3)
        for lin, w in ((self.w_q, wq), (self.w_k, wk), (self.w_v, wv)):
            lin.weight.copy_(w)
        self.w_o.weight.copy_(mha.out_proj.weight)
        if ours:
            bq, bk, bv = mha.in_proj_bias.chunk(3)
            for lin, b in ((self.w_q, bq), (self.w_k, bk), (self.w_v, bv)):
                lin.bias.copy_(b)
            self.w_o.bias.copy_(mha.out_proj.bias)
        return self

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout_p}"
