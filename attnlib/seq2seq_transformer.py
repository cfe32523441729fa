"""A small encoder-decoder transformer: token embeddings, sinusoidal positions, an encoder stack and a stack of
:class:`attnlib.TransformerDecoderBlock` (built in notebook 10, sections 1-4).

It speaks the protocol of the LSTM :class:`attnlib.Seq2Seq`: ``forward(src, tgt, src_key_padding_mask=None,
return_attention=False)`` runs every target position at once (teacher forcing in one pass, made possible by
the causal mask); ``encode`` and ``decode_step`` let :func:`attnlib.greedy_decode` and
:func:`attnlib.beam_search` generate one token at a time; ``save`` and ``load`` write the same file format.

``decode_step`` recomputes the whole prefix at every step: it keeps no cache of keys and values. A cache for
the decoder is notebook 10's exercise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ._checks import check_bool_mask, check_same_batch, check_token_ids, shape_of
from .data import shift_right
from .decoder import TransformerDecoderBlock
from .positional import SinusoidalPositionalEncoding
from .seq2seq import Seq2SeqCheckpoint
from .transformer import TransformerEncoder, TransformerSizes


@dataclass
class Seq2SeqTransformerConfig(TransformerSizes):
    """The two vocabularies, the two depths and the special ids, beside the shared
    :class:`attnlib.TransformerSizes` (keyword-only)."""

    src_vocab_size: int
    tgt_vocab_size: int
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


class TransformerDecoderState(NamedTuple):
    """What :meth:`Seq2SeqTransformer.decode_step` carries: the encoder's ``memory (B, Ls, d_model)``, the
    ``src_key_padding_mask (B, Ls)`` (None when no source token is padding) and the decoder inputs so far,
    ``prefix (B, t)``."""

    memory: torch.Tensor
    src_key_padding_mask: torch.Tensor | None
    prefix: torch.Tensor

    def select(self, index: torch.Tensor) -> "TransformerDecoderState":
        """The state of the batch rows ``index`` (beam search reorders its hypotheses with it)."""
        mask = None if self.src_key_padding_mask is None else self.src_key_padding_mask.index_select(0, index)
        return TransformerDecoderState(self.memory.index_select(0, index), mask, self.prefix.index_select(0, index))


class Seq2SeqTransformer(Seq2SeqCheckpoint, nn.Module):
    """Encoder-decoder transformer: ``src (B, Ls)`` and the target ``tgt (B, T)`` -> logits ``(B, T, tgt_vocab_size)``.

    The decoder reads ``<bos>`` then the target without its last token (:meth:`shift_right`), so position
    t predicts target token t from targets ``0..t-1``. ``src_key_padding_mask`` is ``(B, Ls)`` bool, True at
    real source tokens; None means ``src != pad_id``.
    """

    def __init__(self, config: Seq2SeqTransformerConfig):
        super().__init__()
        self.config = c = config
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        for emb in (self.src_embed, self.tgt_embed):  # std 1/sqrt(d): after the sqrt(d) scale, std 1 like the sinusoids
            nn.init.normal_(emb.weight, std=c.d_model ** -0.5)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.encoder = TransformerEncoder(c.num_encoder_layers, c.d_model, c.num_heads, c.d_ff, c.dropout,
                                          c.activation, c.norm_first)
        self.decoder = nn.ModuleList(
            TransformerDecoderBlock(c.d_model, c.num_heads, c.d_ff, c.dropout, c.activation, c.norm_first)
            for _ in range(c.num_decoder_layers)
        )
        self.final_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.head = nn.Linear(c.d_model, c.tgt_vocab_size)

    @classmethod
    def from_config(cls, config: dict) -> "Seq2SeqTransformer":
        """A new model built from a configuration stored as a dict (random weights)."""
        return cls(Seq2SeqTransformerConfig(**config))

    bos_id = property(lambda self: self.config.bos_id)
    eos_id = property(lambda self: self.config.eos_id)
    pad_id = property(lambda self: self.config.pad_id)

    def _check_ids(self, name: str, ids: torch.Tensor) -> None:
        check_token_ids(name, ids)
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"{name} has shape {shape_of(ids)} but max_len is {self.config.max_len}")

    def shift_right(self, tgt: torch.Tensor) -> torch.Tensor:
        """The decoder input for target ``tgt (B, T)``: ``<bos>`` then ``tgt[:, :-1]``."""
        return shift_right(tgt, self.config.bos_id)

    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> TransformerDecoderState:
        """Run the encoder on ``src (B, Ls)``: the state that :meth:`decode_step` starts from (an empty prefix)."""
        self._check_ids("src", src)
        if src_key_padding_mask is None:
            real = src != self.config.pad_id
        else:
            check_bool_mask(src_key_padding_mask, shape_of(src), "src's shape (B, Ls)", name="src_key_padding_mask")
            real = src_key_padding_mask.expand(src.shape)
        pad = None if bool(real.all()) else real
        x = self.pos(self.src_embed(src) * math.sqrt(self.config.d_model))  # (B, Ls, d_model)
        memory = self.encoder(x, key_padding_mask=pad)  # (B, Ls, d_model)
        return TransformerDecoderState(memory, pad, src.new_empty(src.shape[0], 0))

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None,
               return_attention: bool = False):
        """Logits ``(B, Lt, V)`` for every position of the decoder input ``tgt_in (B, Lt)`` at once, under the causal mask.

        With ``return_attention``: ``(logits, [self weights (B, h, Lt, Lt)], [cross weights (B, h, Lt, Ls)])``,
        one entry per decoder layer.
        """
        self._check_ids("tgt_in", tgt_in)
        check_same_batch("tgt_in", tgt_in, "memory", memory)
        if src_key_padding_mask is not None:
            check_bool_mask(src_key_padding_mask, shape_of(memory)[:2], "memory's (B, Ls)", name="src_key_padding_mask")
        x = self.pos(self.tgt_embed(tgt_in) * math.sqrt(self.config.d_model))  # (B, Lt, d_model)
        self_maps, cross_maps = [], []
        for block in self.decoder:
            out = block(x, memory, memory_key_padding_mask=src_key_padding_mask, return_attention=return_attention,
                        causal=True)
            if return_attention:
                x, s, c = out
                self_maps.append(s)
                cross_maps.append(c)
            else:
                x = out
        logits = self.head(self.final_norm(x))  # (B, Lt, V)
        return (logits, self_maps, cross_maps) if return_attention else logits

    def decode_step(self, tokens: torch.Tensor, state: TransformerDecoderState, need_weights: bool = True):
        """Append ``tokens (B,)`` to the prefix and decode it again, whole (no cache).

        Returns ``(logits (B, V) for the next token, new state, [cross weights (B, h, Ls) per decoder layer])``;
        with ``need_weights=False`` the weights are None and attention takes PyTorch's fused path.
        """
        prefix = torch.cat([state.prefix, tokens[:, None]], dim=1)  # (B, t + 1)
        if prefix.shape[1] > self.config.max_len:
            raise ValueError(f"this model decodes at most max_len={self.config.max_len} tokens (its positions); "
                             f"pass max_len <= {self.config.max_len} to the decoding function")
        if not need_weights:
            logits = self.decode(prefix, state.memory, state.src_key_padding_mask)  # (B, t + 1, V)
            return logits[:, -1], state._replace(prefix=prefix), None
        logits, _, cross = self.decode(prefix, state.memory, state.src_key_padding_mask, return_attention=True)
        return logits[:, -1], state._replace(prefix=prefix), [w[:, :, -1] for w in cross]

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None,
                return_attention: bool = False):
        """Teacher forcing in one pass: logits ``(B, T, V)`` for every target position, or
        ``(logits, [cross weights (B, h, T, Ls) per decoder layer])`` with ``return_attention``."""
        check_token_ids("tgt", tgt)
        check_same_batch("src", src, "tgt", tgt)
        state = self.encode(src, src_key_padding_mask)
        out = self.decode(self.shift_right(tgt), state.memory, state.src_key_padding_mask, return_attention)
        return (out[0], out[2]) if return_attention else out
