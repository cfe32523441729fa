"""The transformer block (attention + feed-forward, each with a residual and a LayerNorm) and an encoder stack."""
from __future__ import annotations

import torch
from torch import nn

from .multihead import MultiHeadAttention, _Eval, copy_checked

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # GELU is the exact (erf) form


def _name(fn) -> str:
    """How to call an activation in a message: a module's repr (``GELU(approximate='tanh')``) or a function's name."""
    return repr(fn) if isinstance(fn, nn.Module) else getattr(fn, "__name__", repr(fn))


def same_activation(theirs, mine) -> tuple[bool, float]:
    """Whether two activations compute the same values on [-6, 6], and the largest difference.

    Compares what they do, not what they are called: ``nn.GELU(approximate="tanh")`` is a
    GELU by name but differs from the exact one by up to about 5e-4.
    """
    x = torch.linspace(-6.0, 6.0, 1201)
    gap = (theirs(x) - mine(x)).abs().max().item()
    return gap <= 1e-6, gap


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

    ``forward(x (B, L, d_model), mask=None, return_attention=False, key_padding_mask=None)``
    returns a tensor of x's shape, or ``(x, weights (B, h, L, L))`` when
    ``return_attention=True``. Masks are bool, True = may attend, as in
    :class:`attnlib.MultiHeadAttention`: ``mask`` is ``(L, L)`` or ``(B, h, L, L)`` (size 1
    where shared), ``key_padding_mask`` is ``(B, L)`` with True for the real tokens.

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

    def _attend(self, x, mask, key_padding_mask, need_weights):
        out, weights = self.attn(x, x, x, mask=mask, need_weights=need_weights, key_padding_mask=key_padding_mask)
        return self.dropout1(out), weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False,
                key_padding_mask: torch.Tensor | None = None):
        if self.norm_first:
            a, weights = self._attend(self.norm1(x), mask, key_padding_mask, return_attention)
            x = x + a
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, weights = self._attend(x, mask, key_padding_mask, return_attention)
            x = self.norm1(x + a)
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
                f"nn.TransformerEncoderLayer's activation {_name(layer.activation)} computes other values than "
                f"this block's {_name(self.ff.activation)} (largest difference {gap:.1e} on [-6, 6])"
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

        d_model = self.norm1.weight.shape[0]
        probe = torch.randn(2, 5, d_model, generator=torch.Generator().manual_seed(0))  # never the global RNG
        weight = layer.linear1.weight
        with _Eval(self, layer):
            mine = self.norm1.weight
            copy_checked(self, copy, lambda x: self(x.to(mine)).to(x), run_theirs, probe.to(weight),
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
