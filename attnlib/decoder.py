"""The transformer decoder block: causal self-attention, cross-attention to the encoder's output, feed-forward.

:class:`TransformerDecoderBlock` is one decoder layer, post-norm or pre-norm, equal to a batch-first
``nn.TransformerDecoderLayer`` with the same weights (:meth:`TransformerDecoderBlock.copy_from_torch`).
The model that stacks it is :class:`attnlib.Seq2SeqTransformer` (``seq2seq_transformer.py``).

Built in notebook 10. Masks are bool, True = may attend: ``mask`` is 2-D ``(Lt, Lt)`` or 4-D; the source's
padding is ``memory_key_padding_mask (B, Ls)``, True = a real token.
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_tensor, shape_of
from .compat import activation_name, copy_checked, same_activation
from .layers import FeedForward
from .multihead import MultiHeadAttention


class TransformerDecoderBlock(nn.Module):
    """One decoder block, batch-first.

    Post-norm (``norm_first=False``, the 2017 paper)::

        x = norm1(x + drop(self_attn(x)))             # causal: position t sees targets 0..t
        x = norm2(x + drop(cross_attn(x, memory)))    # queries from x, keys and values from the encoder
        x = norm3(x + drop(ff(x)))

    Pre-norm (``norm_first=True``)::

        x = x + drop(self_attn(norm1(x)));  x = x + drop(cross_attn(norm2(x), memory));  x = x + drop(ff(norm3(x)))

    ``forward(x (B, Lt, d_model), memory (B, Ls, d_model), mask=None, memory_key_padding_mask=None,
    return_attention=False, *, causal=False)`` returns x's shape, or ``(x, self_weights (B, h, Lt, Lt),
    cross_weights (B, h, Lt, Ls))``. ``causal=True`` (what a decoder needs: position t sees targets
    0..t) and ``mask`` (``(Lt, Lt)`` or ``(B, h, Lt, Lt)``) go to the self-attention;
    ``memory_key_padding_mask (B, Ls)``, True for the real source tokens, to the cross-attention.
    The block adds no mask of its own: say ``causal=True``.
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

    def _check(self, x, memory) -> None:
        for name, t in (("x", x), ("memory", memory)):
            check_tensor(name, t, ndim=3)
            if t.shape[-1] != self.d_model:
                raise ValueError(f"{name} has shape {shape_of(t)} but its last dimension must be d_model={self.d_model}")
        if x.shape[0] != memory.shape[0]:
            raise ValueError(f"x has shape {shape_of(x)} but memory has shape {shape_of(memory)}; the batch sizes must match")

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None = None,
                memory_key_padding_mask: torch.Tensor | None = None, return_attention: bool = False, *,
                causal: bool = False):
        self._check(x, memory)  # the attention modules check the masks
        need, pad = return_attention, memory_key_padding_mask
        if self.norm_first:
            h = self.norm1(x)
            a, self_w = self.self_attn(h, h, h, mask=mask, need_weights=need, causal=causal)
            x = x + self.dropout1(a)
            c, cross_w = self.cross_attn(self.norm2(x), memory, memory, need_weights=need, key_padding_mask=pad)
            x = x + self.dropout2(c)  # (B, Lt, d_model)
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, self_w = self.self_attn(x, x, x, mask=mask, need_weights=need, causal=causal)
            x = self.norm1(x + self.dropout1(a))
            c, cross_w = self.cross_attn(x, memory, memory, need_weights=need, key_padding_mask=pad)
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
        same, gap = same_activation(layer.activation, self.ff.activation)
        if not same:
            raise ValueError(f"nn.TransformerDecoderLayer's activation {activation_name(layer.activation)} differs from "
                             f"this block's {activation_name(self.ff.activation)} by up to {gap:.2e} on [-6, 6]")
        pairs = ((self.ff.linear1, layer.linear1), (self.ff.linear2, layer.linear2),
                 (self.norm1, layer.norm1), (self.norm2, layer.norm2), (self.norm3, layer.norm3))

        def copy():
            self.self_attn.copy_from_torch(layer.self_attn)
            self.cross_attn.copy_from_torch(layer.multihead_attn)
            for mine, theirs in pairs:
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)

        mine = self.norm1.weight
        copy_checked(self, layer, copy, lambda x: self(x.to(mine), x.to(mine)).to(x), lambda x: layer(x, x),
                     self.d_model, "nn.TransformerDecoderLayer")
        return self
