"""The transformer decoder block (causal self-attention, cross-attention, feed-forward) and a small
encoder-decoder model built from it.

* :class:`TransformerDecoderBlock` is one decoder layer, post-norm or pre-norm, equal to a
  batch-first ``nn.TransformerDecoderLayer`` with the same weights (:meth:`copy_from_torch`).
* :class:`Seq2SeqTransformer` puts token embeddings, sinusoidal positions, an encoder stack and a
  decoder stack together. ``forward`` runs every target position at once (teacher forcing in one
  pass, made possible by the causal mask); :meth:`Seq2SeqTransformer.greedy_decode` generates one
  token at a time. It saves and loads itself like :class:`attnlib.TransformerTagger`.

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


@dataclass
class Seq2SeqTransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: int = 128
    max_len: int = 64
    dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder transformer: ``src (B, Ls)`` and ``tgt_in (B, Lt)`` -> logits ``(B, Lt, tgt_vocab_size)``.

    ``tgt_in`` is the target shifted right: ``<bos>`` then the target without its last token
    (:meth:`shift_right`), so position t predicts target token t from targets ``0..t-1``.
    ``src_mask`` is ``(B, Ls)`` bool, True at real source tokens (None: no padding).
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

    def _ids(self, name: str, ids: torch.Tensor) -> None:
        check_tensor(name, ids, ndim=2)
        if ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"{name} must be integer ids of shape (B, L), got dtype {ids.dtype}")
        if ids.shape[1] > self.config.max_len:
            raise ValueError(f"{name} has shape {shape_of(ids)} but max_len is {self.config.max_len}")

    def _src_mask(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor | None:
        if src_mask is None:
            return None
        if src_mask.dtype != torch.bool or src_mask.shape != src.shape:
            raise ValueError(f"src_mask must be bool with the shape of src {shape_of(src)} (True = real token), "
                             f"got {src_mask.dtype} of shape {shape_of(src_mask)}")
        return src_mask[:, None, None, :]  # (B, 1, 1, Ls)

    def shift_right(self, tgt: torch.Tensor) -> torch.Tensor:
        """The decoder input for target ``tgt (B, Lt)``: ``<bos>`` then ``tgt[:, :-1]``."""
        bos = tgt.new_full((tgt.shape[0], 1), self.config.bos_id)
        return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, Lt)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None, return_attention: bool = False):
        """``src (B, Ls)`` -> memory ``(B, Ls, d_model)`` (or ``(memory, [self weights per layer])``)."""
        self._ids("src", src)
        x = self.pos(self.src_embed(src) * math.sqrt(self.config.d_model))  # (B, Ls, d_model)
        return self.encoder(x, self._src_mask(src, src_mask), return_attention=return_attention)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
               return_attention: bool = False):
        """Logits ``(B, Lt, V)`` for every position of ``tgt_in (B, Lt)`` at once, under the causal mask.

        With ``return_attention``: ``(logits, [self weights (B, h, Lt, Lt)], [cross weights (B, h, Lt, Ls)])``,
        one entry per decoder layer.
        """
        self._ids("tgt_in", tgt_in)
        if src_mask is not None and src_mask.shape != memory.shape[:2]:
            raise ValueError(f"src_mask has shape {shape_of(src_mask)} but memory has shape {shape_of(memory)}; "
                             "it must be (B, Ls)")
        memory_mask = None if src_mask is None else src_mask[:, None, None, :]  # (B, 1, 1, Ls)
        self_mask = causal_mask(tgt_in.shape[1], device=tgt_in.device)  # (Lt, Lt)
        x = self.pos(self.tgt_embed(tgt_in) * math.sqrt(self.config.d_model))  # (B, Lt, d_model)
        self_maps, cross_maps = [], []
        for block in self.decoder:
            if return_attention:
                x, s, c = block(x, memory, self_mask, memory_mask, return_attention=True)
                self_maps.append(s)
                cross_maps.append(c)
            else:
                x = block(x, memory, self_mask, memory_mask)
        logits = self.head(self.final_norm(x))  # (B, Lt, V)
        return (logits, self_maps, cross_maps) if return_attention else logits

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher forcing in one pass: logits ``(B, Lt, V)`` for every position of ``tgt_in``."""
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"src has shape {shape_of(src)} but tgt_in has shape {shape_of(tgt_in)}; "
                             "the batch sizes must match")
        return self.decode(tgt_in, self.encode(src, src_mask), src_mask)

    @torch.no_grad()
    def greedy_decode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None, max_len: int = 20):
        """Generate one token at a time, feeding each prediction back in, until every sequence has ``<eos>``.

        Returns ``(ids (B, T), [cross weights per decoder layer, each (B, h, T, Ls)])`` with
        ``T <= max_len``; row t of a map is the attention used to predict token t; ids after a
        sequence's ``<eos>`` are ``pad_id``. Runs in eval mode and restores the previous mode.
        """
        was_training = self.training
        self.eval()
        try:
            memory = self.encode(src, src_mask)
            B, c = src.shape[0], self.config
            tgt_in = torch.full((B, 1), c.bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros(B, dtype=torch.bool, device=src.device)
            out = []
            for _ in range(max_len):
                logits = self.decode(tgt_in, memory, src_mask)  # (B, t, V): recomputes the prefix (no cache)
                nxt = logits[:, -1].argmax(-1)  # (B,)
                out.append(nxt.masked_fill(done, c.pad_id))
                done = done | (nxt == c.eos_id)
                tgt_in = torch.cat([tgt_in, nxt[:, None]], dim=1)
                if bool(done.all()):
                    break
            ids = torch.stack(out, 1)  # (B, T)
            _, _, cross = self.decode(tgt_in[:, :-1], memory, src_mask, return_attention=True)
        finally:
            self.train(was_training)
        return ids, cross

    def save(self, path: str | Path, **extra) -> None:
        """Save config, weights and any extra JSON-able metadata (vocabularies as lists, accuracy) to one file."""
        state = {k: v.detach().cpu() for k, v in self.state_dict().items()}
        torch.save({"config": asdict(self.config), "state_dict": state, "extra": extra}, path)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> tuple["Seq2SeqTransformer", dict]:
        """Load a model saved with :meth:`save`; returns ``(model in eval mode, extra)``."""
        blob = torch.load(path, map_location=map_location, weights_only=True)
        model = cls(Seq2SeqTransformerConfig(**blob["config"]))
        model.load_state_dict(blob["state_dict"])
        return model.eval(), blob.get("extra", {})


def sequence_loss(logits: torch.Tensor, tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``tgt (B, T)``, padding ignored."""
    if logits.shape[:2] != tgt.shape:
        raise ValueError(f"logits has shape {shape_of(logits)} but tgt has shape {shape_of(tgt)}; (B, T) must match")
    return F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=pad_id)


@torch.no_grad()
def evaluate_transformer(model: Seq2SeqTransformer, data, batch_size: int = 512) -> dict[str, float]:
    """Greedy-decoding token and exact-match accuracy of ``model`` on a :class:`attnlib.Seq2SeqData`.

    Scored exactly as :func:`attnlib.evaluate_seq2seq` scores the LSTM models: every target
    position up to and including ``<eos>``; a missing or extra token counts as wrong.
    Returns ``{"token_acc": ..., "seq_acc": ...}``.
    """
    from .data import batches
    from .training import sequence_accuracy, token_accuracy

    device = next(model.parameters()).device
    pad = data.tgt_vocab.pad_id
    T = data.tgt.shape[1]
    preds = []
    for b in batches(data, batch_size, shuffle=False, device=device):
        ids, _ = model.greedy_decode(b.src, b.src_mask, max_len=T)
        preds.append(F.pad(ids, (0, T - ids.shape[1]), value=pad).cpu())  # (B, T)
    pred = torch.cat(preds)
    return {"token_acc": token_accuracy(pred, data.tgt, pad), "seq_acc": sequence_accuracy(pred, data.tgt, pad)}
