"""The transformer decoder block: causal self-attention, cross-attention to the encoder's output, feed-forward.

:class:`TransformerDecoderBlock` is one decoder layer, post-norm or pre-norm, equal to a batch-first
``nn.TransformerDecoderLayer`` with the same weights (:meth:`TransformerDecoderBlock.copy_from_torch`).
The model that stacks it is :class:`attnlib.Seq2SeqTransformer` (``seq2seq_transformer.py``).

Masks are bool, True = may attend, and are 2-D ``(Lq, Lk)`` or 4-D ``(B or 1, h or 1, Lq, Lk)``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor, shape_of
from .attention import causal_mask
from .multihead import MultiHeadAttention
from .positional import SinusoidalPositionalEncoding
from .transformer import FeedForward, TransformerEncoder

_PROBE = torch.linspace(-6.0, 6.0, 241)  # where two activations are compared (gelu vs its tanh form differ by ~1e-3)


def _check_mask(name: str, mask: torch.Tensor | None, target: tuple[int, int, int, int], desc: str) -> None:
    """A bool mask, 2-D ``(Lq, Lk)`` or 4-D, that broadcasts to ``target``; the message names ``name``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool tensor (True = may attend), got {got}")
    if mask.dim() not in (2, 4):
        raise ValueError(
            f"{name} has shape {shape_of(mask)} ({mask.dim()}-D) but must be 2-D (Lq, Lk) = {target[2:]} "
            f"or 4-D {desc} = {target}; for a padding mask (B, Lk) pass mask[:, None, None, :]"
        )
    try:
        ok = torch.broadcast_shapes(tuple(mask.shape), target) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} has shape {shape_of(mask)} but it must broadcast to {desc} = {target}")


class TransformerDecoderBlock(nn.Module):
    """One decoder block, batch-first.

    Post-norm (``norm_first=False``, the 2017 paper)::

        x = norm1(x + drop(self_attn(x)))             # causal: position t sees targets 0..t
        x = norm2(x + drop(cross_attn(x, memory)))    # queries from x, keys and values from the encoder
        x = norm3(x + drop(ff(x)))

    Pre-norm (``norm_first=True``)::

        x = x + drop(self_attn(norm1(x)));  x = x + drop(cross_attn(norm2(x), memory));  x = x + drop(ff(norm3(x)))

    ``forward(x (B, Lt, d_model), memory (B, Ls, d_model), self_mask=None, memory_mask=None,
    return_attention=False)`` returns x's shape, or ``(x, self_weights (B, h, Lt, Lt),
    cross_weights (B, h, Lt, Ls))``. ``self_mask`` broadcasts to ``(B, h, Lt, Lt)`` (usually
    ``causal_mask(Lt)``), ``memory_mask`` to ``(B, h, Lt, Ls)`` (usually the source padding
    mask as ``(B, 1, 1, Ls)``). The block itself adds no mask: pass the causal one.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1, activation: str = "relu",
                 norm_first: bool = False, layer_norm_eps: float = 1e-5):
        super().__init__()
        self.d_model, self.num_heads, self.norm_first = d_model, num_heads, norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def _check(self, x, memory, self_mask, memory_mask) -> None:
        for name, t in (("x", x), ("memory", memory)):
            check_tensor(name, t, ndim=3)
            if t.shape[-1] != self.d_model:
                raise ValueError(f"{name} has shape {shape_of(t)} but its last dimension must be d_model={self.d_model}")
        if x.shape[0] != memory.shape[0]:
            raise ValueError(f"x has shape {shape_of(x)} but memory has shape {shape_of(memory)}; the batch sizes must match")
        (B, Lt, _), Ls, h = x.shape, memory.shape[1], self.num_heads
        _check_mask("self_mask", self_mask, (B, h, Lt, Lt), "(B, h, Lt, Lt)")
        _check_mask("memory_mask", memory_mask, (B, h, Lt, Ls), "(B, h, Lt, Ls)")

    def forward(self, x: torch.Tensor, memory: torch.Tensor, self_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, return_attention: bool = False):
        self._check(x, memory, self_mask, memory_mask)
        need = return_attention
        if self.norm_first:
            q = self.norm1(x)
            a, self_w = self.self_attn(q, q, q, mask=self_mask, need_weights=need)
            x = x + self.dropout1(a)
            c, cross_w = self.cross_attn(self.norm2(x), memory, memory, mask=memory_mask, need_weights=need)
            x = x + self.dropout2(c)  # (B, Lt, d_model)
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, self_w = self.self_attn(x, x, x, mask=self_mask, need_weights=need)
            x = self.norm1(x + self.dropout1(a))
            c, cross_w = self.cross_attn(x, memory, memory, mask=memory_mask, need_weights=need)
            x = self.norm2(x + self.dropout2(c))  # (B, Lt, d_model)
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return (x, self_w, cross_w) if return_attention else x

    @torch.no_grad()
    def copy_from_torch(self, layer: nn.TransformerDecoderLayer) -> "TransformerDecoderBlock":
        """Copy a batch-first ``nn.TransformerDecoderLayer`` of the same size and kind into this block.

        Raises ValueError, before copying anything, for a layer whose outputs would differ from this
        block's: not batch-first, other norm placement, eps, dropout, activation (compared by value
        on a probe tensor), missing biases, or other sizes.
        """
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise ValueError(f"expected an nn.TransformerDecoderLayer, got {type(layer).__name__}")
        mine_act = self.ff.activation
        theirs_act = layer.activation
        act_same = torch.allclose(theirs_act(_PROBE), mine_act(_PROBE), atol=1e-7, rtol=0)
        checks = [
            ("batch_first", layer.self_attn.batch_first, True),
            ("norm_first", layer.norm_first, self.norm_first),
            ("layer_norm_eps", layer.norm1.eps, self.norm1.eps),
            ("dropout", layer.dropout1.p, self.dropout1.p),
            ("bias", layer.linear1.bias is not None and layer.norm1.bias is not None, True),
            ("d_model", layer.linear1.in_features, self.d_model),
            ("num_heads", layer.self_attn.num_heads, self.num_heads),
            ("d_ff", layer.linear1.out_features, self.ff.linear1.out_features),
        ]
        for what, theirs, mine in checks:
            if theirs != mine:  # copying would succeed (or half succeed) but the outputs would differ
                raise ValueError(f"nn.TransformerDecoderLayer has {what}={theirs} but this block has {what}={mine}")
        if not act_same:
            gap = (theirs_act(_PROBE) - mine_act(_PROBE)).abs().max().item()
            raise ValueError(f"nn.TransformerDecoderLayer's activation {theirs_act!r} differs from this block's "
                             f"{mine_act!r} by up to {gap:.2e} on [-6, 6]")
        self.self_attn.copy_from_torch(layer.self_attn)
        self.cross_attn.copy_from_torch(layer.multihead_attn)
        pairs = ((self.ff.linear1, layer.linear1), (self.ff.linear2, layer.linear2),
                 (self.norm1, layer.norm1), (self.norm2, layer.norm2), (self.norm3, layer.norm3))
        for mine, theirs in pairs:
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
        return self
