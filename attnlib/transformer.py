"""The transformer block (attention + feed-forward, each with a residual and a LayerNorm) and an encoder stack."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .multihead import MultiHeadAttention

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # GELU is the exact (erf) form


class FeedForward(nn.Module):
    """Position-wise feed-forward: ``linear2(dropout(activation(linear1(x))))``, the same for every position."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = _ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, L, d_model)


class TransformerBlock(nn.Module):
    """One encoder block, batch-first.

    Post-norm (``norm_first=False``, the 2017 paper):
        ``x = norm1(x + drop(attn(x)))``; ``x = norm2(x + drop(ff(x)))``
    Pre-norm (``norm_first=True``, most modern models):
        ``x = x + drop(attn(norm1(x)))``; ``x = x + drop(ff(norm2(x)))``

    ``forward(x (B, L, d_model), mask=None, return_attention=False)`` returns a tensor of
    x's shape, or ``(x, weights (B, h, L, L))`` when ``return_attention=True``. The mask is
    bool, True = may attend, and broadcasts to ``(B, h, L, L)``.
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

    def _attend(self, x, mask, need_weights):
        out, weights = self.attn(x, x, x, mask=mask, need_weights=need_weights)
        return self.dropout1(out), weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False):
        if self.norm_first:
            a, weights = self._attend(self.norm1(x), mask, return_attention)
            x = x + a
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, weights = self._attend(x, mask, return_attention)
            x = self.norm1(x + a)
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return (x, weights) if return_attention else x

    @torch.no_grad()
    def copy_from_torch(self, layer: nn.TransformerEncoderLayer) -> "TransformerBlock":
        """Copy the weights of a batch-first ``nn.TransformerEncoderLayer`` of the same size and kind."""
        theirs_act = {F.relu: "relu", F.gelu: "gelu"}.get(layer.activation, type(layer.activation).__name__.lower())
        mine_act = type(self.ff.activation).__name__.lower()
        for what, theirs, mine in (("norm_first", layer.norm_first, self.norm_first),
                                   ("layer_norm_eps", layer.norm1.eps, self.norm1.eps),
                                   ("bias", layer.linear1.bias is not None, True)):
            if theirs != mine:  # copying would succeed but the outputs would differ
                raise ValueError(f"nn.TransformerEncoderLayer has {what}={theirs} but this block has {what}={mine}")
        if theirs_act != mine_act:
            raise ValueError(f"nn.TransformerEncoderLayer has activation {theirs_act!r} but this block has {mine_act!r}")
        self.attn.copy_from_torch(layer.self_attn)
        for mine, theirs in ((self.ff.linear1, layer.linear1), (self.ff.linear2, layer.linear2),
                             (self.norm1, layer.norm1), (self.norm2, layer.norm2)):
            if mine.weight.shape != theirs.weight.shape:
                raise ValueError(
                    f"shape mismatch: ours {tuple(mine.weight.shape)}, PyTorch's {tuple(theirs.weight.shape)}"
                )
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
        return self


class TransformerEncoder(nn.Module):
    """A stack of ``num_layers`` TransformerBlocks (plus a final LayerNorm when pre-norm).

    ``forward(x, mask=None, return_attention=False)`` returns x's shape, or
    ``(x, [weights of each layer, each (B, h, L, L)])``.
    """

    def __init__(self, num_layers: int, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.1,
                 activation: str = "relu", norm_first: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, dropout, activation, norm_first) for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False):
        maps = []
        for layer in self.layers:
            if return_attention:
                x, w = layer(x, mask, return_attention=True)
                maps.append(w)
            else:
                x = layer(x, mask)
        x = self.final_norm(x)
        return (x, maps) if return_attention else x
