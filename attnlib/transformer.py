"""The transformer block (attention + feed-forward, each with a residual and a LayerNorm) and an encoder stack.

Built in notebook 07. GPT (notebook 11) uses the same block, pre-norm and causal, with a KV cache.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .compat import activation_name, copy_checked, same_activation
from .layers import FeedForward
from .multihead import KVCache, MultiHeadAttention


@dataclass(kw_only=True)
class TransformerSizes:
    """The sizes that every small transformer model of the series shares, keyword-only: the width
    ``d_model``, ``num_heads``, the feed-forward width ``d_ff``, the longest input ``max_len``, ``dropout``,
    the feed-forward ``activation`` and ``norm_first`` (pre-norm). :class:`attnlib.TaggerConfig` and
    :class:`attnlib.Seq2SeqTransformerConfig` add their own fields to these."""

    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 128
    max_len: int = 64
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False


class TransformerBlock(nn.Module):
    """One encoder block, batch-first.

    Post-norm (``norm_first=False``, the 2017 paper):
        ``x = norm1(x + drop(attn(x)))``; ``x = norm2(x + drop(ff(x)))``
    Pre-norm (``norm_first=True``, most modern models):
        ``x = x + drop(attn(norm1(x)))``; ``x = x + drop(ff(norm2(x)))``

    ``forward(x (B, L, d_model), mask=None, return_attention=False, key_padding_mask=None, *,
    causal=False, cache=None, head_mask=None)`` returns a tensor of x's shape, or ``(x, weights (B, h,
    L, L_total))`` when ``return_attention=True``. Masks are bool, True = may attend, as in
    :class:`attnlib.MultiHeadAttention`: ``mask`` is ``(L, L)`` or ``(B, h, L, L)`` (size 1
    where shared), ``key_padding_mask`` is ``(B, L)`` with True for the real tokens; ``causal``,
    ``cache`` (a :class:`attnlib.KVCache`) and ``head_mask`` go to the attention unchanged.

    Naming rule of the package: attention modules follow ``nn.MultiheadAttention`` and
    take ``need_weights`` (they always return ``(out, weights)``); blocks and models return
    their output alone unless ``return_attention=True`` asks for the maps as well.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False,
                key_padding_mask: torch.Tensor | None = None, *, causal: bool = False, cache: KVCache | None = None,
                head_mask: torch.Tensor | None = None):
        h = self.norm1(x) if self.norm_first else x
        a, weights = self.attn(h, h, h, mask=mask, need_weights=return_attention, key_padding_mask=key_padding_mask,
                               causal=causal, cache=cache, head_mask=head_mask)
        if self.norm_first:
            x = x + self.dropout1(a)
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self.dropout1(a))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return (x, weights) if return_attention else x  # (B, L, d_model)

    @torch.no_grad()
    def copy_from_torch(self, layer: nn.TransformerEncoderLayer) -> "TransformerBlock":
        """Copy the weights of an ``nn.TransformerEncoderLayer`` of the same size and kind.

        The activations are compared by what they compute, not by name. After copying, both
        run on a probe input (eval mode); if their outputs differ, the copy is undone and a
        ValueError is raised. The layer may be batch-first or not.
        """
        for what, theirs, mine in (("norm_first", layer.norm_first, self.norm_first),
                                   ("layer_norm_eps", layer.norm1.eps, self.norm1.eps),
                                   ("bias", layer.linear1.bias is not None, True)):
            if theirs != mine:  # copying would succeed but the outputs would differ
                raise ValueError(f"nn.TransformerEncoderLayer has {what}={theirs} but this block has {what}={mine}")
        same, gap = same_activation(layer.activation, self.ff.activation)
        if not same:
            raise ValueError(
                f"nn.TransformerEncoderLayer's activation {activation_name(layer.activation)} computes other "
                f"values than this block's {activation_name(self.ff.activation)} (largest difference {gap:.1e} on [-6, 6])"
            )
        self.attn._check_copyable(layer.self_attn)
        pairs = ((self.ff.linear1, layer.linear1), (self.ff.linear2, layer.linear2),
                 (self.norm1, layer.norm1), (self.norm2, layer.norm2))
        for mine, theirs in pairs:
            if mine.weight.shape != theirs.weight.shape:
                raise ValueError(
                    f"shape mismatch: ours {tuple(mine.weight.shape)}, PyTorch's {tuple(theirs.weight.shape)}"
                )
        def copy():
            self.attn.copy_from_torch(layer.self_attn)  # checks itself on its own probe
            for mine, theirs in pairs:
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)

        def run_theirs(x):
            batch_first = layer.self_attn.batch_first
            out = layer(x if batch_first else x.transpose(0, 1))
            return out if batch_first else out.transpose(0, 1)

        mine = self.norm1.weight
        copy_checked(self, layer, copy, lambda x: self(x.to(mine)).to(x), run_theirs, mine.shape[0],
                     "nn.TransformerEncoderLayer")
        return self


class TransformerEncoder(nn.Module):
    """A stack of ``num_layers`` TransformerBlocks (plus a final LayerNorm when pre-norm).

    ``forward(x, mask=None, return_attention=False, key_padding_mask=None)`` returns x's
    shape, or ``(x, [weights of each layer, each (B, h, L, L)])``; the masks are those of
    :class:`TransformerBlock`.
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, dropout, activation, norm_first) for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False,
                key_padding_mask: torch.Tensor | None = None):
        maps = []
        for layer in self.layers:
            if return_attention:
                x, w = layer(x, mask, return_attention=True, key_padding_mask=key_padding_mask)
                maps.append(w)  # (B, h, L, L)
            else:
                x = layer(x, mask, key_padding_mask=key_padding_mask)
        x = self.final_norm(x)  # (B, L, d_model)
        return (x, maps) if return_attention else x
