"""A complete small encoder-only model: token embedding + positions + a stack of TransformerBlocks + a
per-position output layer. It maps a sequence of tokens to one prediction per position, which is all the
toy tasks of notebooks 05-08 need (sorting, reversal), and it saves/loads itself for the explorer."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_tensor, shape_of
from .checkpoint import Checkpointed
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding
from .transformer import TransformerEncoder, TransformerSizes

_POSITIONS = ("sinusoidal", "learned", "none")


@dataclass
class TaggerConfig(TransformerSizes):
    """A tagger's vocabulary, outputs, depth and positions, beside the shared :class:`attnlib.TransformerSizes`
    (keyword-only)."""

    vocab_size: int
    num_outputs: int
    num_layers: int = 2
    positions: str = "sinusoidal"


class TransformerTagger(Checkpointed, nn.Module):
    """tokens (B, L) -> logits (B, L, num_outputs), one prediction per position.

    ``positions`` is "sinusoidal", "learned" or "none" (a model without positions is
    permutation-equivariant). ``forward(tokens, mask=None, return_attention=False,
    key_padding_mask=None)``; the masks are those of :class:`attnlib.TransformerBlock`: bool,
    True = may attend, ``mask`` ``(L, L)`` or ``(B, heads, L, L)`` (size 1 where shared) and
    ``key_padding_mask`` ``(B, L)`` with True for the real tokens. With
    ``return_attention=True`` it returns ``(logits, [weights per layer, each (B, heads, L, L)])``.
    ``save(path, **extra)`` and ``TransformerTagger.load(path)`` come from :class:`attnlib.checkpoint.Checkpointed`.
    """

    config_class = TaggerConfig

    def __init__(self, config: TaggerConfig):
        super().__init__()
        if config.positions not in _POSITIONS:
            raise ValueError(f"positions must be one of {_POSITIONS}, got {config.positions!r}")
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        # std 1/√d, so that after the √d scale in forward each entry has std 1, like the ±1 sinusoids;
        # nn.Embedding's default std 1 would drown the positions (8x larger at d=64) and block positional tasks.
        nn.init.normal_(self.embed.weight, std=c.d_model ** -0.5)
        if c.positions == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        elif c.positions == "learned":
            self.pos = LearnedPositionalEncoding(c.d_model, c.max_len)
        else:
            self.pos = nn.Identity()
        self.encoder = TransformerEncoder(c.num_layers, c.d_model, c.num_heads, c.d_ff, c.dropout,
                                          c.activation, c.norm_first)
        self.head = nn.Linear(c.d_model, c.num_outputs)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None, return_attention: bool = False,
                key_padding_mask: torch.Tensor | None = None):
        check_tensor("tokens", tokens, ndim=2)
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be integer ids of shape (B, L), got dtype {tokens.dtype}")
        if tokens.shape[1] > self.config.max_len:
            raise ValueError(f"tokens has shape {shape_of(tokens)} but max_len is {self.config.max_len}")
        x = self.embed(tokens) * math.sqrt(self.config.d_model)  # (B, L, d_model)
        x = self.pos(x)
        if return_attention:
            x, maps = self.encoder(x, mask, return_attention=True, key_padding_mask=key_padding_mask)
            return self.head(x), maps  # (B, L, num_outputs)
        return self.head(self.encoder(x, mask, key_padding_mask=key_padding_mask))  # (B, L, num_outputs)
