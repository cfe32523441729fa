"""An LSTM encoder-decoder, with or without attention (built in notebook 01, sections 2-3, and notebook 02, section 2).

* :class:`Encoder` reads the source and returns every output ``(B, Ls, H_enc)`` and its final
  state. That final state is all a plain :class:`Decoder` ever sees: the bottleneck.
* :class:`AttentionDecoder` also looks back at every encoder output at every step, through any
  attention module with the signature of :class:`attnlib.AdditiveAttention`.
* :class:`Seq2Seq` ties them together and speaks the protocol it shares with
  :class:`attnlib.Seq2SeqTransformer`: ``forward(src, tgt, src_key_padding_mask=None,
  return_attention=False)`` for training, ``encode`` and ``decode_step`` for
  :func:`attnlib.greedy_decode` and :func:`attnlib.beam_search`, ``save`` and ``load``.

Token conventions follow :mod:`attnlib.data`: targets end with ``<eos>``; the decoder's first input
is ``<bos>`` (:func:`attnlib.data.shift_right`).

Speed: the decoder's time loop checks nothing (``forward`` checks once per call), embeds every gold
input at once under teacher forcing, applies the output layer once after the loop, and does no
masking work when no source token is padding. A plain decoder under teacher forcing runs its LSTM
over the whole target in one call.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import (check_bool_mask, check_fraction, check_right_padded, check_same_batch, check_token_ids,
                      shape_of)
from .checkpoint import load_checkpoint, save_checkpoint
from .data import Vocab, shift_right
from .rnn_attention import AdditiveAttention, LuongAttention, _RNNAttention


class DecoderState(NamedTuple):
    """What an LSTM decoder carries between steps. ``h``, ``c``: ``(layers, B, H)``; for an attention decoder
    also ``memory`` (the encoder outputs, ``(B, Ls, H_enc)``), ``keys_proj`` (its projected keys) and
    ``src_key_padding_mask`` ``(B, Ls)`` (None when no source token is padding)."""

    h: torch.Tensor
    c: torch.Tensor
    memory: torch.Tensor | None = None
    keys_proj: torch.Tensor | None = None
    src_key_padding_mask: torch.Tensor | None = None

    def select(self, index: torch.Tensor) -> "DecoderState":
        """The state of the batch rows ``index`` (beam search reorders its hypotheses with it)."""
        pick = lambda x: None if x is None else x.index_select(0, index)  # noqa: E731
        return DecoderState(self.h.index_select(1, index), self.c.index_select(1, index),
                            pick(self.memory), pick(self.keys_proj), pick(self.src_key_padding_mask))


class Encoder(nn.Module):
    """Embedding + LSTM over the source.

    ``forward(src (B, Ls), src_key_padding_mask (B, Ls) bool or None) -> (outputs (B, Ls, output_dim), (h, c))``
    with ``h``, ``c`` of shape ``(num_layers, B, hidden_dim)``. Without a mask, the padding is
    ``src == pad_id``. Padding is skipped (packed sequences, when a row has any), so the real tokens must come first in
    each row; the final state is that of each sequence's last real token and the outputs at padded
    positions are 0. When ``bidirectional``, ``output_dim = 2 * hidden_dim`` and a Linear "bridge"
    maps the two directions' final states to one of ``hidden_dim``.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, bidirectional: bool = False,
                 num_layers: int = 1, dropout: float = 0.0, pad_id: int = 0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = nn.LSTM(emb_dim, hidden_dim, num_layers, batch_first=True,
                           bidirectional=bidirectional, dropout=dropout if num_layers > 1 else 0.0)
        self.hidden_dim, self.num_layers, self.bidirectional, self.pad_id = hidden_dim, num_layers, bidirectional, pad_id
        self.output_dim = hidden_dim * (2 if bidirectional else 1)
        if bidirectional:
            self.bridge_h = nn.Linear(2 * hidden_dim, hidden_dim)
            self.bridge_c = nn.Linear(2 * hidden_dim, hidden_dim)

    def forward(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None):
        check_token_ids("src", src)
        if src_key_padding_mask is None:
            real, name = src != self.pad_id, f"src != pad_id ({self.pad_id})"
        else:
            check_bool_mask(src_key_padding_mask, shape_of(src), "src's shape (B, Ls)", name="src_key_padding_mask")
            real, name = src_key_padding_mask.expand(src.shape), "src_key_padding_mask"
        check_right_padded(real, name)
        lengths = real.sum(1)
        if bool((lengths == 0).any()):
            raise ValueError(f"every source needs at least one real token; lengths are {lengths.tolist()}")
        if bool((lengths == src.shape[1]).all()):  # no padding: nothing to skip, and packing costs time
            out, (h, c) = self.rnn(self.embedding(src))  # (B, Ls, output_dim)
        else:
            packed = pack_padded_sequence(self.embedding(src), lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, (h, c) = self.rnn(packed)
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, Ls, output_dim)
        if self.bidirectional:  # (layers * 2, B, H) -> (layers, B, 2H) -> (layers, B, H)
            join = lambda s: s.view(self.num_layers, 2, *s.shape[1:]).permute(0, 2, 1, 3).flatten(2)  # noqa: E731
            h, c = torch.tanh(self.bridge_h(join(h))), self.bridge_c(join(c))
        return out, (h.contiguous(), c.contiguous())


class Decoder(nn.Module):
    """A plain LSTM decoder: it starts from the encoder's final state and never sees the source again.

    One ``nn.LSTM`` (``self.rnn``) holds the weights. ``forward(inputs (B, T), state, teacher_forcing=1.0)
    -> (logits (B, T, V), None)`` runs it over the whole target in one call;
    ``step(tokens (B,), state) -> (logits (B, V), new state, None)`` runs the same weights one token at a
    time (``nn.LSTMCell``'s computation, :meth:`lstm_step`), for decoding.
    ``context_dim`` is for :class:`AttentionDecoder`, which adds a context to the input and the output.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, num_layers: int = 1,
                 dropout: float = 0.0, context_dim: int = 0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.LSTM(emb_dim + context_dim, hidden_dim, num_layers, batch_first=True,
                           dropout=dropout if num_layers > 1 else 0.0)
        self.out = nn.Linear(hidden_dim + context_dim, vocab_size)
        self.vocab_size, self.hidden_dim, self.num_layers, self.dropout = vocab_size, hidden_dim, num_layers, dropout

    def init_state(self, memory: torch.Tensor, enc_state: tuple[torch.Tensor, torch.Tensor],
                   src_key_padding_mask: torch.Tensor | None) -> DecoderState:
        return DecoderState(*enc_state)

    def lstm_step(self, x: torch.Tensor, hs, cs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One step of the stacked LSTM: input ``x (B, D_in)``, one ``(B, H)`` state per layer in ``hs``, ``cs``.

        Layer i computes what ``nn.LSTMCell`` computes (the same kernel), with the weights of layer i
        of ``self.rnn``; dropout sits between layers, as in ``nn.LSTM``. Returns the new lists.
        """
        new_h, new_c = [], []
        for i, (w_ih, w_hh, b_ih, b_hh) in enumerate(self.rnn.all_weights):
            if i > 0 and self.dropout > 0:
                x = F.dropout(x, self.dropout, self.training)
            h, c = torch.lstm_cell(x, (hs[i], cs[i]), w_ih, w_hh, b_ih, b_hh)  # (B, H) each
            new_h.append(h)
            new_c.append(c)
            x = h
        return new_h, new_c

    def _advance(self, emb: torch.Tensor, hs, cs, state: DecoderState):
        """One step from the embedded input ``emb (B, E)``: ``(hs, cs, features for the output layer, weights)``."""
        hs, cs = self.lstm_step(emb, hs, cs)
        return hs, cs, hs[-1], None  # the top layer's state (B, H)

    def step(self, tokens: torch.Tensor, state: DecoderState):
        hs, cs, features, weights = self._advance(self.embedding(tokens), state.h.unbind(0), state.c.unbind(0), state)
        return self.out(features), state._replace(h=torch.stack(hs), c=torch.stack(cs)), weights  # logits (B, V)

    def forward(self, inputs: torch.Tensor, state: DecoderState, teacher_forcing: float = 1.0,
                generator: torch.Generator | None = None):
        """Decode ``inputs.shape[1]`` steps from ``state``: ``(logits (B, T, V), None)``.

        ``inputs (B, T)`` are the gold decoder inputs (``<bos>``, then the target shifted). At step
        t > 0 each row reads its gold input with probability ``teacher_forcing``, else its own
        previous prediction (argmax); the draws are one ``(T, B)`` uniform tensor from ``generator``
        (None: PyTorch's global generator).

        Under teacher forcing the LSTM runs over the whole target in one call. Under scheduled
        sampling the tokens each step reads are found first, one step at a time without gradients
        (a choice of token passes no gradient anyway); then the LSTM runs over those tokens in one
        call and one backward pass, the same computation with less work. With dropout between layers in
        training, the choices and the gradients must see the same dropout masks: then one pass,
        step by step.
        """
        if teacher_forcing < 1.0:
            if self.training and self.dropout > 0 and self.num_layers > 1:
                return self._loop(inputs, state, teacher_forcing, generator)[:2]
            with torch.no_grad():
                inputs = self._loop(inputs, state, teacher_forcing, generator)[2]  # (B, T) the tokens read
        out, _ = self.rnn(self.embedding(inputs), (state.h, state.c))  # (B, T, H): one call for every step
        return self.out(out), None

    def _loop(self, inputs: torch.Tensor, state: DecoderState, teacher_forcing: float = 1.0,
              generator: torch.Generator | None = None):
        """:meth:`forward` one step at a time: ``(logits (B, T, V), weights or None, tokens read (B, T))``.

        The gold inputs are embedded at once and the output layer runs once, after the loop.
        """
        B, T = inputs.shape
        gold = self.embedding(inputs)  # (B, T, E): every gold input at once
        draws = None
        if 0.0 < teacher_forcing < 1.0:
            draws = torch.rand(T, B, generator=generator, device=inputs.device) < teacher_forcing  # (T, B) True = gold
        hs, cs = state.h.unbind(0), state.c.unbind(0)
        features, weights, read = [], [], [inputs[:, 0]]
        for t in range(T):
            x = gold[:, t]  # (B, E)
            if t > 0 and teacher_forcing < 1.0:
                with torch.no_grad():  # a choice of token passes no gradient
                    predicted = self.out(features[-1]).argmax(-1)  # (B,) the previous step's prediction
                read.append(predicted if draws is None else torch.where(draws[t], inputs[:, t], predicted))
                x = self.embedding(read[-1])
            hs, cs, f, w = self._advance(x, hs, cs, state)
            features.append(f)
            weights.append(w)
        logits = self.out(torch.stack(features, 1))  # (B, T, V): one call for every step
        tokens = torch.stack(read, 1) if len(read) == T else inputs
        return logits, None if weights[0] is None else torch.stack(weights, 1), tokens


class AttentionDecoder(Decoder):
    """An LSTM decoder that attends over all encoder outputs at every step (Bahdanau style).

    At step t: the previous top-layer state ``s`` queries the encoder outputs, giving a context
    ``c_t`` and weights ``(B, Ls)``; the LSTM reads ``[embedding(y_{t-1}); c_t]``; the output layer
    reads ``[s_t; c_t]``. ``attention`` is any module with the signature of
    :class:`attnlib.AdditiveAttention` / :class:`attnlib.LuongAttention` (query_dim = ``hidden_dim``,
    key_dim = ``enc_dim``). The library's own modules are called through their unchecked
    ``attend`` in the time loop (the shapes are checked once per call); any other module, a
    subclass that overrides ``forward`` or a module with hooks is called as itself.

    ``step(tokens (B,), state) -> (logits (B, V), new state, weights (B, Ls))``.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, enc_dim: int, attention: nn.Module,
                 num_layers: int = 1, dropout: float = 0.0):
        super().__init__(vocab_size, emb_dim, hidden_dim, num_layers, dropout, context_dim=enc_dim)
        for attr, want in (("query_dim", hidden_dim), ("key_dim", enc_dim)):
            got = getattr(attention, attr, want)
            if got != want:
                raise ValueError(f"attention has {attr}={got} but the decoder needs {attr}={want}")
        self.attention, self.enc_dim = attention, enc_dim

    def init_state(self, memory, enc_state, src_key_padding_mask) -> DecoderState:
        project = getattr(self.attention, "project_keys", None)
        return DecoderState(*enc_state, memory, project(memory) if project else None, src_key_padding_mask)

    def _attend(self, query: torch.Tensor, state: DecoderState):
        """``(context (B, H_enc), weights (B, Ls))`` of ``query (B, H)`` over the encoder outputs in ``state``."""
        att, mask = self.attention, state.src_key_padding_mask
        if type(att).forward is _RNNAttention.forward and not (att._forward_hooks or att._forward_pre_hooks):
            return att.attend(query, state.memory, state.keys_proj, mask)
        if state.keys_proj is None:
            return att(query, state.memory, mask)
        return att(query, state.memory, mask, keys_proj=state.keys_proj)

    def _advance(self, emb, hs, cs, state):
        context, weights = self._attend(hs[-1], state)  # the query: the top layer's previous state
        hs, cs = self.lstm_step(torch.cat([emb, context], dim=-1), hs, cs)  # input (B, E + H_enc)
        return hs, cs, torch.cat([hs[-1], context], dim=-1), weights  # features (B, H + H_enc)

    def forward(self, inputs, state, teacher_forcing: float = 1.0, generator: torch.Generator | None = None):
        """As :meth:`Decoder.forward`, always one step at a time (each step's query is the previous state):
        ``(logits (B, T, V), weights (B, T, Ls))``."""
        return self._loop(inputs, state, teacher_forcing, generator)[:2]


class Seq2SeqCheckpoint:
    """``save(path, src_vocab=None, tgt_vocab=None, **extra)`` and ``Model.load(path) -> (model in eval mode,
    extra)`` through :mod:`attnlib.checkpoint`, for a seq2seq model with ``config`` and ``from_config``.

    The vocabularies (:class:`attnlib.Vocab` or None) are stored as plain lists and come back as
    ``extra["src_vocab"]`` and ``extra["tgt_vocab"]``. One file format for both seq2seq families.
    """

    def save(self, path: str | Path, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None,
             **extra) -> None:
        vocabs = {name: None if v is None else v.to_dict() for name, v in (("src_vocab", src_vocab),
                                                                          ("tgt_vocab", tgt_vocab))}
        save_checkpoint(self, path, self.config, **vocabs, **extra)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu"):
        config, state, extra = load_checkpoint(path, map_location)
        model = cls.from_config(config)
        model.load_state_dict(state)
        for name in ("src_vocab", "tgt_vocab"):
            extra[name] = None if extra.get(name) is None else Vocab.from_dict(extra[name])
        return model.eval(), extra


class Seq2Seq(Seq2SeqCheckpoint, nn.Module):
    """Encoder + decoder. ``forward(src, tgt, src_key_padding_mask=None, return_attention=False,
    teacher_forcing=1.0, generator=None) -> logits (B, T, V)``, or ``(logits, weights (B, T, Ls) or None)``
    with ``return_attention``."""

    def __init__(self, encoder: Encoder, decoder: Decoder, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0):
        super().__init__()
        if encoder.hidden_dim != decoder.hidden_dim or encoder.num_layers != decoder.num_layers:
            raise ValueError(
                f"the encoder's final state is (layers={encoder.num_layers}, hidden={encoder.hidden_dim}) but the decoder "
                f"has (layers={decoder.num_layers}, hidden={decoder.hidden_dim}); they must match"
            )
        if isinstance(decoder, AttentionDecoder) and decoder.enc_dim != encoder.output_dim:
            raise ValueError(f"the decoder attends over enc_dim={decoder.enc_dim} but the encoder outputs {encoder.output_dim}")
        self.encoder, self.decoder = encoder, decoder
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id

    def encode(self, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None) -> DecoderState:
        """Run the encoder on ``src (B, Ls)``; return the decoder's initial state (no mask: ``src != pad_id``)."""
        memory, enc_state = self.encoder(src, src_key_padding_mask)  # checks src and the mask
        real = src != self.encoder.pad_id if src_key_padding_mask is None else src_key_padding_mask.expand(src.shape)
        return self.decoder.init_state(memory, enc_state, None if bool(real.all()) else real)

    def decode_step(self, tokens: torch.Tensor, state: DecoderState, need_weights: bool = True):
        """One decoder step from ``tokens (B,)``: ``(logits (B, V), new state, weights (B, Ls) or None)``.

        ``need_weights=False`` returns None for the weights (they cost nothing extra here)."""
        logits, state, weights = self.decoder.step(tokens, state)
        return logits, state, weights if need_weights else None

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None,
                return_attention: bool = False, teacher_forcing: float = 1.0, generator: torch.Generator | None = None):
        """Decode ``tgt.shape[1]`` steps: logits ``(B, T, V)`` (and the weights ``(B, T, Ls)`` with ``return_attention``).

        At step t the input is ``<bos>`` (t = 0) or, per sequence, the gold token ``tgt[:, t-1]``
        with probability ``teacher_forcing``, else the model's own previous prediction (argmax).
        """
        check_token_ids("tgt", tgt)
        check_same_batch("src", src, "tgt", tgt)
        check_fraction("teacher_forcing", teacher_forcing)
        state = self.encode(src, src_key_padding_mask)
        logits, weights = self.decoder(shift_right(tgt, self.bos_id), state, teacher_forcing, generator)
        return (logits, weights) if return_attention else logits

    @property
    def config(self) -> dict:
        """The constructor arguments of the encoder, decoder and attention, as plain values."""
        enc, dec = self.encoder, self.decoder
        return {
            "encoder": {"vocab_size": enc.embedding.num_embeddings, "emb_dim": enc.embedding.embedding_dim,
                        "hidden_dim": enc.hidden_dim, "bidirectional": enc.bidirectional,
                        "num_layers": enc.num_layers, "dropout": float(enc.rnn.dropout), "pad_id": enc.pad_id},
            "decoder": {"vocab_size": dec.vocab_size, "emb_dim": dec.embedding.embedding_dim,
                        "hidden_dim": dec.hidden_dim, "num_layers": dec.num_layers, "dropout": float(dec.dropout),
                        **({"enc_dim": dec.enc_dim} if isinstance(dec, AttentionDecoder)
                           else {"context_dim": dec.out.in_features - dec.hidden_dim})},
            "attention": _attention_config(dec.attention) if isinstance(dec, AttentionDecoder) else None,
            "special_ids": {"bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id},
        }

    @classmethod
    def from_config(cls, config: dict) -> "Seq2Seq":
        """A new model built from :attr:`config` (random weights)."""
        att = config["attention"]
        if att is None:
            decoder = Decoder(**config["decoder"])
        else:
            kind, args = att["type"], {k: v for k, v in att.items() if k != "type"}
            module = AdditiveAttention(**args) if kind == "additive" else LuongAttention(**args)
            decoder = AttentionDecoder(**config["decoder"], attention=module)
        return cls(Encoder(**config["encoder"]), decoder, **config["special_ids"])


def _attention_config(att: nn.Module) -> dict:
    if isinstance(att, AdditiveAttention):
        return {"type": "additive", "query_dim": att.query_dim, "key_dim": att.key_dim, "attn_dim": att.W_s.out_features}
    if isinstance(att, LuongAttention):
        attn_dim = att.W.out_features if att.method == "concat" else None
        return {"type": "luong", "query_dim": att.query_dim, "key_dim": att.key_dim, "method": att.method,
                "attn_dim": attn_dim}
    raise ValueError(f"a Seq2Seq can be saved with AdditiveAttention or LuongAttention, got {type(att).__name__}")


def save_seq2seq(model: Seq2Seq, path, src_vocab: Vocab | None = None, tgt_vocab: Vocab | None = None, **extra) -> None:
    """``model.save(path, src_vocab, tgt_vocab, **extra)``: configuration, weights, vocabularies and JSON-able
    ``extra`` in one file that ``torch.load(weights_only=True)`` reads (:mod:`attnlib.checkpoint`)."""
    model.save(path, src_vocab, tgt_vocab, **extra)


def load_seq2seq(path, map_location="cpu") -> tuple[Seq2Seq, dict]:
    """``Seq2Seq.load(path)``: ``(model in eval mode, extra)``, with ``extra["src_vocab"]`` and
    ``extra["tgt_vocab"]`` as :class:`attnlib.Vocab` (or None)."""
    return Seq2Seq.load(path, map_location)
