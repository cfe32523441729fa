"""An LSTM encoder-decoder, with or without attention, plus greedy decoding and beam search.

* :class:`Encoder` reads the source and returns every output ``(B, L, H_enc)`` and its
  final state. That final state is all a plain :class:`Decoder` ever sees: the bottleneck.
* :class:`AttentionDecoder` also looks back at every encoder output at every step, through
  any attention module with the signature of :class:`attnlib.AdditiveAttention`.
* :class:`Seq2Seq` ties them together; ``forward`` runs the decoder for the length of the
  target, feeding gold tokens (teacher forcing) or its own predictions.
* :func:`save_seq2seq` / :func:`load_seq2seq` store a trained model (configuration, weights,
  vocabularies, metadata) in one file that ``torch.load(weights_only=True)`` can read.

Token conventions follow :mod:`attnlib.data`: targets end with ``<eos>``; the decoder's
first input is ``<bos>``.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._checks import check_bool_mask, check_tensor, shape_of


class DecoderState(NamedTuple):
    """What a decoder carries between steps. ``h``, ``c``: ``(layers, B, H)``;
    ``memory`` (encoder outputs) ``(B, L, H_enc)``, ``keys_proj`` and ``mask`` ``(B, L)``, or None."""

    h: torch.Tensor
    c: torch.Tensor
    memory: torch.Tensor | None = None
    keys_proj: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def select(self, index: torch.Tensor) -> "DecoderState":
        """The state of the batch rows ``index`` (used by beam search to reorder hypotheses)."""
        pick = lambda x: None if x is None else x.index_select(0, index)  # noqa: E731
        return DecoderState(self.h.index_select(1, index), self.c.index_select(1, index),
                            pick(self.memory), pick(self.keys_proj), pick(self.mask))


def source_mask(src: torch.Tensor, mask_or_lengths: torch.Tensor | None, pad_id: int) -> torch.Tensor:
    """A ``(B, L)`` bool mask of real source tokens from a mask, lengths ``(B,)``, or (None) ``src != pad_id``.

    The encoder reads the first ``mask.sum()`` tokens of each row, so the real tokens must
    come first and the padding after them (right padding, no gaps). A mask with left
    padding or a gap is refused with a ValueError naming the first such row.
    """
    check_tensor("src", src, ndim=2)
    if mask_or_lengths is None:
        mask, what = src != pad_id, f"src != pad_id ({pad_id})"
    elif mask_or_lengths.dtype == torch.bool:
        check_bool_mask(mask_or_lengths, tuple(src.shape), "src's shape (B, L)", name="src_mask")
        mask, what = mask_or_lengths.expand(src.shape), "src_mask"
    else:
        lengths = mask_or_lengths
        if lengths.dim() != 1 or lengths.shape[0] != src.shape[0]:
            raise ValueError(f"lengths must have shape ({src.shape[0]},) to match src {shape_of(src)}, got {shape_of(lengths)}")
        if len(lengths) and (lengths.min() < 0 or lengths.max() > src.shape[1]):
            raise ValueError(f"every length must be between 0 and L={src.shape[1]} (src {shape_of(src)}), got {lengths.tolist()}")
        return torch.arange(src.shape[1], device=src.device)[None, :] < lengths.to(src.device)[:, None]
    prefix = torch.arange(src.shape[1], device=mask.device)[None, :] < mask.sum(1, keepdim=True)  # (B, L)
    bad = (mask != prefix).any(1).nonzero().flatten()
    if len(bad):
        row = int(bad[0])
        raise ValueError(
            f"row {row} of {what} is {mask[row].int().tolist()}: the real tokens must come first, then the "
            f"padding (no left padding, no gaps), because the encoder reads the first mask.sum() tokens of each row; "
            f"{len(bad)} row(s) are not like that"
        )
    return mask


class Encoder(nn.Module):
    """Embedding + LSTM over the source.

    ``forward(src (B, L), mask (B, L) bool) -> (outputs (B, L, output_dim), (h, c))`` with
    ``h``, ``c`` of shape ``(num_layers, B, hidden_dim)``. Padding is skipped (packed
    sequences), so the final state is that of each sequence's last real token and the
    outputs at padded positions are 0. When ``bidirectional``, ``output_dim = 2 * hidden_dim``
    and a Linear "bridge" maps the two directions' final states to one of ``hidden_dim``.
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

    def forward(self, src: torch.Tensor, mask: torch.Tensor | None = None):
        mask = source_mask(src, mask, self.pad_id)
        lengths = mask.sum(1)
        if bool((lengths == 0).any()):
            raise ValueError(f"every source needs at least one real token; lengths are {lengths.tolist()}")
        packed = pack_padded_sequence(self.embedding(src), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, L, output_dim)
        if self.bidirectional:  # (layers * 2, B, H) -> (layers, B, 2H) -> (layers, B, H)
            join = lambda s: s.view(self.num_layers, 2, *s.shape[1:]).permute(0, 2, 1, 3).flatten(2)  # noqa: E731
            h, c = torch.tanh(self.bridge_h(join(h))), self.bridge_c(join(c))
        return out, (h.contiguous(), c.contiguous())


class Decoder(nn.Module):
    """A plain LSTM decoder: it starts from the encoder's final state and never sees the source again.

    ``step(tokens (B,), state) -> (logits (B, V), new state, None)``.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, num_layers: int = 1,
                 dropout: float = 0.0, context_dim: int = 0):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim)
        # One LSTMCell per layer: a decoder runs one step at a time, and cells are cheaper per step.
        self.cells = nn.ModuleList(
            nn.LSTMCell(emb_dim + context_dim if i == 0 else hidden_dim, hidden_dim) for i in range(num_layers)
        )
        self.out = nn.Linear(hidden_dim + context_dim, vocab_size)
        self.vocab_size, self.hidden_dim, self.num_layers, self.dropout = vocab_size, hidden_dim, num_layers, dropout

    def _rnn(self, x: torch.Tensor, state: DecoderState) -> DecoderState:
        """One step of the stacked LSTM: ``x`` ``(B, D_in)``; returns the state with new ``h``, ``c``."""
        hs, cs = [], []
        for i, cell in enumerate(self.cells):
            if i > 0 and self.dropout > 0:
                x = nn.functional.dropout(x, self.dropout, self.training)
            h, c = cell(x, (state.h[i], state.c[i]))
            hs.append(h)
            cs.append(c)
            x = h
        return state._replace(h=torch.stack(hs), c=torch.stack(cs))

    def init_state(self, memory: torch.Tensor, enc_state: tuple[torch.Tensor, torch.Tensor],
                   mask: torch.Tensor) -> DecoderState:
        return DecoderState(*enc_state)

    def step(self, tokens: torch.Tensor, state: DecoderState):
        state = self._rnn(self.embedding(tokens), state)
        return self.out(state.h[-1]), state, None  # logits (B, V) from the top layer


class AttentionDecoder(Decoder):
    """An LSTM decoder that attends over all encoder outputs at every step (Bahdanau style).

    At step t: the previous top-layer state ``s`` queries the encoder outputs, giving a
    context ``c_t`` and weights ``(B, L)``; the LSTM reads ``[embedding(y_{t-1}); c_t]``;
    the output layer reads ``[s_t; c_t]``. ``attention`` is any module with the signature
    of :class:`attnlib.AdditiveAttention` / :class:`attnlib.LuongAttention` (query_dim =
    ``hidden_dim``, key_dim = ``enc_dim``).

    ``step(tokens (B,), state) -> (logits (B, V), new state, weights (B, L))``.
    """

    def __init__(self, vocab_size: int, emb_dim: int, hidden_dim: int, enc_dim: int, attention: nn.Module,
                 num_layers: int = 1, dropout: float = 0.0):
        super().__init__(vocab_size, emb_dim, hidden_dim, num_layers, dropout, context_dim=enc_dim)
        for attr, want in (("query_dim", hidden_dim), ("key_dim", enc_dim)):
            got = getattr(attention, attr, want)
            if got != want:
                raise ValueError(f"attention has {attr}={got} but the decoder needs {attr}={want}")
        self.attention, self.enc_dim = attention, enc_dim

    def init_state(self, memory, enc_state, mask) -> DecoderState:
        project = getattr(self.attention, "project_keys", None)
        return DecoderState(*enc_state, memory, project(memory) if project else None, mask)

    def step(self, tokens: torch.Tensor, state: DecoderState):
        query = state.h[-1]  # (B, H): the top layer's previous state
        if state.keys_proj is None:
            context, weights = self.attention(query, state.memory, state.mask)
        else:
            context, weights = self.attention(query, state.memory, state.mask, keys_proj=state.keys_proj)
        state = self._rnn(torch.cat([self.embedding(tokens), context], dim=-1), state)  # input (B, E + H_enc)
        logits = self.out(torch.cat([state.h[-1], context], dim=-1))  # (B, V)
        return logits, state, weights


class Seq2Seq(nn.Module):
    """Encoder + decoder. ``forward(src, src_mask, tgt, teacher_forcing) -> (logits (B, T, V), weights (B, T, L) or None)``."""

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

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> DecoderState:
        """Run the encoder; return the decoder's initial state. ``src_mask`` may also be lengths ``(B,)``."""
        mask = source_mask(src, src_mask, self.pad_id)
        memory, enc_state = self.encoder(src, mask)
        return self.decoder.init_state(memory, enc_state, mask)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor | None, tgt: torch.Tensor,
                teacher_forcing: float = 1.0, generator: torch.Generator | None = None):
        """Decode ``tgt.shape[1]`` steps.

        At step t the input is ``<bos>`` (t = 0) or, per sequence, the gold token ``tgt[:, t-1]``
        with probability ``teacher_forcing``, else the model's own previous prediction (argmax).

        Returns ``(logits (B, T, V), weights (B, T, L) or None)``.
        """
        check_tensor("tgt", tgt, ndim=2)
        if tgt.shape[0] != src.shape[0]:
            raise ValueError(f"src has shape {shape_of(src)} but tgt has shape {shape_of(tgt)}; the batch sizes must match")
        if not 0.0 <= teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing must be between 0 and 1, got {teacher_forcing}")
        state = self.encode(src, src_mask)
        tokens = torch.full((src.shape[0],), self.bos_id, dtype=torch.long, device=src.device)
        logits, weights = [], []
        for t in range(tgt.shape[1]):
            step_logits, state, w = self.decoder.step(tokens, state)
            logits.append(step_logits)
            weights.append(w)
            if teacher_forcing >= 1.0:
                tokens = tgt[:, t]
            elif teacher_forcing <= 0.0:
                tokens = step_logits.argmax(-1)
            else:
                gold = torch.rand(tgt.shape[0], generator=generator, device=src.device) < teacher_forcing
                tokens = torch.where(gold, tgt[:, t], step_logits.argmax(-1))
        stacked = torch.stack(weights, 1) if weights and weights[0] is not None else None
        return torch.stack(logits, 1), stacked


class _EvalMode:
    """Switch a module to eval mode (no dropout) for a block, then restore its mode."""

    def __init__(self, model: nn.Module):
        self.model, self.was_training = model, model.training

    def __enter__(self):
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was_training)


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor | None = None, max_len: int = 50):
    """Pick the most likely token at every step, until every sequence has emitted ``<eos>``.

    Returns ``(tokens (B, T), weights (B, T, L) or None)``, ``T <= max_len``; tokens after a
    sequence's ``<eos>`` are ``pad_id``.
    """
    with _EvalMode(model):
        state = model.encode(src, src_mask)
        B = src.shape[0]
        tokens = torch.full((B,), model.bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        out, weights = [], []
        for _ in range(max_len):
            logits, state, w = model.decoder.step(tokens, state)
            tokens = logits.argmax(-1)
            out.append(tokens.masked_fill(done, model.pad_id))
            weights.append(w)
            done = done | (tokens == model.eos_id)
            if bool(done.all()):
                break
    stacked = torch.stack(weights, 1) if weights[0] is not None else None
    return torch.stack(out, 1), stacked


@torch.no_grad()
def beam_search(model: Seq2Seq, src: torch.Tensor, src_mask: torch.Tensor | None = None, beam_size: int = 5,
                max_len: int = 50, length_penalty: float = 1.0):
    """Keep the ``beam_size`` most likely partial outputs per input; return the best finished one.

    ``src`` is one sequence ``(L,)`` or a batch ``(B, L)``. The search ranks by total log
    probability; at the end each hypothesis is scored ``log p / length ** length_penalty``
    (0 = no normalisation, 1 = mean log probability per token, ``<eos>`` included).

    Returns ``(tokens (B, T), scores (B,))`` (or ``(T,)`` and a 0-d score for one sequence),
    tokens after ``<eos>`` are ``pad_id``. ``beam_size=1`` gives exactly :func:`greedy_decode`.
    """
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {beam_size!r}")
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    single = src.dim() == 1
    if single:
        src = src.unsqueeze(0)
        src_mask = None if src_mask is None else src_mask.unsqueeze(0)
    with _EvalMode(model):
        B, K, dev = src.shape[0], beam_size, src.device
        state = model.encode(src, src_mask).select(torch.arange(B, device=dev).repeat_interleave(K))
        scores = torch.full((B, K), float("-inf"), dtype=torch.float64, device=dev)
        scores[:, 0] = 0.0  # all beams start identical: keep one alive
        tokens = torch.full((B * K,), model.bos_id, dtype=torch.long, device=dev)
        history = torch.empty(B * K, 0, dtype=torch.long, device=dev)
        done = torch.zeros(B * K, dtype=torch.bool, device=dev)
        lengths = torch.zeros(B * K, dtype=torch.float64, device=dev)
        for _ in range(max_len):
            logits, state, _ = model.decoder.step(tokens, state)
            logp = torch.log_softmax(logits.double(), -1)  # (B*K, V)
            V = logp.shape[-1]
            finished_row = torch.full((V,), float("-inf"), dtype=torch.float64, device=dev)
            finished_row[model.pad_id] = 0.0  # a finished hypothesis only extends with pad, at no cost
            logp = torch.where(done[:, None], finished_row, logp)
            top, idx = (scores.view(B * K, 1) + logp).view(B, K * V).topk(K, dim=1)  # (B, K)
            rows = (torch.arange(B, device=dev)[:, None] * K + idx // V).view(-1)
            tokens = (idx % V).view(-1)
            state = state.select(rows)
            lengths = lengths[rows] + (~done[rows]).double()
            done = done[rows] | (tokens == model.eos_id)
            history = torch.cat([history[rows], tokens[:, None]], 1)
            scores = top
            if bool(done.all()):
                break
        final = (scores.view(-1) / lengths.clamp(min=1) ** length_penalty).view(B, K)
        best_score, best = final.max(1)
        best_rows = torch.arange(B, device=dev) * K + best
        result = history[best_rows]
    return (result[0], best_score[0]) if single else (result, best_score)


# ------------------------------------------------------------------ saving and loading

def _attention_config(att: nn.Module) -> dict:
    from .rnn_attention import AdditiveAttention, LuongAttention

    if isinstance(att, AdditiveAttention):
        return {"type": "additive", "query_dim": att.query_dim, "key_dim": att.key_dim, "attn_dim": att.W_s.out_features}
    if isinstance(att, LuongAttention):
        attn_dim = att.W.out_features if att.method == "concat" else None
        return {"type": "luong", "query_dim": att.query_dim, "key_dim": att.key_dim, "method": att.method,
                "attn_dim": attn_dim}
    raise ValueError(f"save_seq2seq knows AdditiveAttention and LuongAttention, got {type(att).__name__}")


def save_seq2seq(model: Seq2Seq, path, src_vocab=None, tgt_vocab=None, **extra) -> None:
    """Save a :class:`Seq2Seq` to one file: its constructor arguments, weights, vocabularies and ``extra``.

    ``src_vocab`` / ``tgt_vocab`` are :class:`attnlib.Vocab` objects (or None); ``extra`` is
    JSON-able metadata (the task, measured accuracy). Only plain types are stored, so the file
    loads with ``torch.load(path, weights_only=True)``. Load it with :func:`load_seq2seq`.
    """
    enc, dec = model.encoder, model.decoder
    config = {
        "encoder": {"vocab_size": enc.embedding.num_embeddings, "emb_dim": enc.embedding.embedding_dim,
                    "hidden_dim": enc.hidden_dim, "bidirectional": enc.bidirectional, "num_layers": enc.num_layers,
                    "dropout": float(enc.rnn.dropout), "pad_id": enc.pad_id},
        "decoder": {"vocab_size": dec.vocab_size, "emb_dim": dec.embedding.embedding_dim, "hidden_dim": dec.hidden_dim,
                    "num_layers": dec.num_layers, "dropout": float(dec.dropout)},
        "attention": _attention_config(dec.attention) if isinstance(dec, AttentionDecoder) else None,
        "special_ids": {"bos_id": model.bos_id, "eos_id": model.eos_id, "pad_id": model.pad_id},
    }
    if isinstance(dec, AttentionDecoder):
        config["decoder"]["enc_dim"] = dec.enc_dim
    else:
        config["decoder"]["context_dim"] = dec.out.in_features - dec.hidden_dim
    vocabs = {name: None if v is None else {"itos": list(v.itos), "specials": list(v.specials)}
              for name, v in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab))}
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"config": config, "state_dict": state, "vocabs": vocabs, "extra": dict(extra)}, path)


def load_seq2seq(path, map_location="cpu") -> tuple[Seq2Seq, dict]:
    """Load a model saved with :func:`save_seq2seq`.

    Returns ``(model in eval mode, extra)``; ``extra`` also holds ``"src_vocab"`` and
    ``"tgt_vocab"`` as :class:`attnlib.Vocab` objects (or None if none were saved).
    """
    from .data import Vocab
    from .rnn_attention import AdditiveAttention, LuongAttention

    blob = torch.load(path, map_location=map_location, weights_only=True)
    config = blob["config"]
    encoder = Encoder(**config["encoder"])
    att = config["attention"]
    if att is None:
        decoder = Decoder(**config["decoder"])
    else:
        att = dict(att)
        kind = att.pop("type")
        module = AdditiveAttention(**att) if kind == "additive" else LuongAttention(**att)
        decoder = AttentionDecoder(**config["decoder"], attention=module)
    model = Seq2Seq(encoder, decoder, **config["special_ids"])
    model.load_state_dict(blob["state_dict"])
    extra = dict(blob.get("extra", {}))
    for name, v in blob.get("vocabs", {}).items():
        extra[name] = None if v is None else Vocab(v["itos"][len(v["specials"]):], specials=v["specials"])
    return model.eval(), extra
