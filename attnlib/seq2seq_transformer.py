"""A small encoder-decoder transformer: token embeddings, sinusoidal positions, an encoder stack and a stack of
:class:`attnlib.TransformerDecoderBlock`.

``forward`` runs every target position at once (teacher forcing in one pass, made possible by the causal
mask); :meth:`Seq2SeqTransformer.greedy_decode` generates one token at a time. It saves and loads itself
like :class:`attnlib.TransformerTagger`.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor, shape_of
from .decoder import TransformerDecoderBlock
from .positional import SinusoidalPositionalEncoding
from .transformer import TransformerEncoder


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
        x = self.pos(self.tgt_embed(tgt_in) * math.sqrt(self.config.d_model))  # (B, Lt, d_model)
        self_maps, cross_maps = [], []
        for block in self.decoder:
            if return_attention:
                x, s, c = block(x, memory, memory_key_padding_mask=src_mask, return_attention=True, causal=True)
                self_maps.append(s)
                cross_maps.append(c)
            else:
                x = block(x, memory, memory_key_padding_mask=src_mask, causal=True)
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
