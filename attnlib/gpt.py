"""A small decoder-only language model (GPT), built in notebook 11: token + learned position embeddings, a stack
of pre-norm causal :class:`attnlib.TransformerBlock`, a final LayerNorm and an output layer tied to the token
embedding. With a KV cache (one :class:`attnlib.KVCache` per layer) it generates one token at a time without
recomputing the keys and values of the past."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .checkpoint import Checkpointed
from .multihead import KVCache
from .sampling import CausalLM, sample_next  # noqa: F401  (sample_next: also attnlib.gpt.sample_next)
from .transformer import TransformerBlock


@dataclass
class GPTConfig:
    """Sizes of a :class:`GPT`. ``d_ff`` defaults to ``4 * d_model``."""

    vocab_size: int
    max_len: int
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int | None = None
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_len", "d_model", "num_heads", "num_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={self.d_model} and "
                             f"num_heads={self.num_heads} (d_model % num_heads = {self.d_model % self.num_heads})")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class GPT(CausalLM, Checkpointed, nn.Module):
    """ids (B, T) -> next-token logits (B, T, vocab_size); position t sees only tokens 0..t.

    Each block is ``x = x + attn(norm1(x)); x = x + ff(norm2(x))`` with causal attention
    (``TransformerBlock(norm_first=True, activation="gelu")``). ``generate`` comes from
    :class:`attnlib.sampling.CausalLM`; ``save`` / ``GPT.load`` from :class:`attnlib.checkpoint.Checkpointed`.
    """

    config_class = GPTConfig

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.max_len, self.vocab_size, self.num_layers, self.num_heads = c.max_len, c.vocab_size, c.num_layers, c.num_heads
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_len, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(c.d_model, c.num_heads, c.d_ff, c.dropout, activation="gelu", norm_first=True)
            for _ in range(c.num_layers)
        )
        self.norm = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one (vocab_size, d_model) matrix reads and writes tokens
        for p in self.parameters():
            if p.dim() == 2:  # small weights, as in GPT-2; biases stay 0, LayerNorms 1 and 0
                nn.init.normal_(p, std=0.02)

    def new_cache(self) -> list[KVCache]:
        """An empty cache: one :class:`attnlib.KVCache` per layer, for up to ``max_len`` tokens."""
        return [KVCache(self.config.max_len) for _ in self.blocks]

    def forward(self, ids: torch.Tensor, cache: list[KVCache] | None = None, return_attention: bool = False,
                head_mask: torch.Tensor | None = None):
        """ids (B, T) -> logits (B, T, vocab_size), or ``(logits, [weights per layer, each (B, h, T, T_total)])``.

        With a ``cache`` (``model.new_cache()``), ``ids`` are only the new tokens: their positions continue
        from ``len(cache[0])``, their keys and values are appended to it, and they attend to all
        ``T_total = len(cache[0]) + T`` tokens. ``head_mask (num_layers, num_heads)`` scales each head's
        output (0 removes a head: ablation).
        """
        start = self.check_inputs(ids, cache, head_mask)
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)  # continue after the cached tokens
        x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))  # (B, T, d_model)
        maps = []
        for i, block in enumerate(self.blocks):
            out = block(x, return_attention=return_attention, causal=True, cache=None if cache is None else cache[i],
                        head_mask=None if head_mask is None else head_mask[i])
            x, w = out if return_attention else (out, None)
            maps.append(w)
        logits = self.head(self.norm(x))  # (B, T, vocab_size)
        return (logits, maps) if return_attention else logits
