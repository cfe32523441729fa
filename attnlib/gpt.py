"""A small decoder-only language model (GPT): token + learned position embeddings, a stack of pre-norm
causal blocks, a final LayerNorm and an output layer tied to the token embedding. With a
:class:`KVCache` it generates one token at a time without recomputing the keys and values of the past."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor, shape_of
from .attention import scaled_dot_product_attention
from .multihead import MultiHeadAttention, fused_attention
from .transformer import FeedForward


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
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model must be divisible by num_heads, got d_model={self.d_model} and "
                             f"num_heads={self.num_heads} (d_model % num_heads = {self.d_model % self.num_heads})")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


class KVCache:
    """The keys and values of every token seen so far, per layer, each ``(B, h, length, d_k)``.

    Made by :meth:`GPT.new_cache`; :meth:`GPT.forward` appends to it in place. ``len(cache)`` is
    the number of tokens it holds, which is also the position of the next token.
    """

    def __init__(self, num_layers: int, max_len: int):
        self.max_len = max_len
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    def __len__(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    @property
    def batch_size(self) -> int | None:
        return None if self.keys[0] is None else self.keys[0].shape[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new ``k, v (B, h, T, d_k)`` of ``layer``; return all of that layer's keys and values."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)  # (B, h, length + T, d_k)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def nbytes(self) -> int:
        """Bytes held by the cached tensors (keys and values of every layer)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)

    def __repr__(self) -> str:
        return f"KVCache(layers={len(self.keys)}, length={len(self)}, max_len={self.max_len}, bytes={self.nbytes()})"


class GPTBlock(nn.Module):
    """Pre-norm causal block: ``x = x + attn(norm1(x))``; ``x = x + ff(norm2(x))``.

    The attention reuses :class:`MultiHeadAttention`'s projections and head split, so that the
    new keys and values can be appended to a cache before the heads attend.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation="gelu")
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None = None, layer: int = 0,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, d_model), mask (T, T_total) bool or None -> (x (B, T, d_model), weights (B, h, T, T_total) or None)."""
        a = self.attn
        h = self.norm1(x)
        q, k, v = a.split_heads(a.w_q(h)), a.split_heads(a.w_k(h)), a.split_heads(a.w_v(h))  # (B, h, T, d_k)
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, h, T_total, d_k): the past and the new tokens
        p = a.dropout_p if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)  # (B, h, T, d_k)
        else:
            heads, weights = fused_attention(q, k, v, mask, dropout_p=p), None
        x = x + self.dropout(a.w_o(a.merge_heads(heads)))  # (B, T, d_model)
        x = x + self.dropout(self.ff(self.norm2(x)))
        return x, weights


class GPT(nn.Module):
    """ids (B, T) -> next-token logits (B, T, vocab_size); position t sees only tokens 0..t."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.max_len, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(GPTBlock(c.d_model, c.num_heads, c.d_ff, c.dropout) for _ in range(c.num_layers))
        self.norm = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: one (vocab_size, d_model) matrix reads and writes tokens
        for name, p in self.named_parameters():
            if p.dim() == 2:  # small weights, as in GPT-2; biases stay 0, LayerNorms 1 and 0
                nn.init.normal_(p, std=0.02)

    def new_cache(self) -> KVCache:
        """An empty :class:`KVCache` for this model."""
        return KVCache(self.config.num_layers, self.config.max_len)

    def _check_ids(self, ids: torch.Tensor, start: int, cache: KVCache | None) -> None:
        check_tensor("ids", ids, ndim=2)
        if ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"ids must be integer token ids of shape (B, T), got dtype {ids.dtype}")
        if ids.shape[1] == 0:
            raise ValueError(f"ids has shape {shape_of(ids)}; it needs at least one token")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"ids must lie in [0, {self.config.vocab_size - 1}] (vocab_size={self.config.vocab_size}), "
                             f"got values from {ids.min().item()} to {ids.max().item()}")
        if start + ids.shape[1] > self.config.max_len:
            raise ValueError(f"ids has shape {shape_of(ids)} and the cache holds {start} tokens: {start + ids.shape[1]} "
                             f"positions in all, but max_len is {self.config.max_len}")
        if cache is not None and cache.batch_size is not None and cache.batch_size != ids.shape[0]:
            raise ValueError(f"ids has batch size {ids.shape[0]} but the cache was filled with batch size {cache.batch_size}")

    def forward(self, ids: torch.Tensor, cache: KVCache | None = None, return_attention: bool = False):
        """ids (B, T) -> logits (B, T, vocab_size), or ``(logits, [weights per layer, each (B, h, T, T_total)])``.

        With a ``cache``, ``ids`` are only the new tokens: their positions continue from
        ``len(cache)``, their keys and values are appended to it, and they attend to all
        ``T_total = len(cache) + T`` tokens.
        """
        if cache is not None and not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a KVCache from GPT.new_cache(), got {type(cache).__name__}")
        start = len(cache) if cache is not None else 0
        self._check_ids(ids, start, cache)
        T = ids.shape[1]
        positions = torch.arange(start, start + T, device=ids.device)  # (T,): continue after the cached tokens
        x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))  # (B, T, d_model)
        # new token i sits at position start + i and may see keys 0..start + i
        mask = None if T == 1 else torch.ones(T, start + T, dtype=torch.bool, device=ids.device).tril(start)
        maps = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, mask, cache, i, need_weights=return_attention)
            maps.append(w)
        logits = self.head(self.norm(x))  # (B, T, vocab_size)
        return (logits, maps) if return_attention else logits

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Extend ``ids (B, T)`` by ``max_new_tokens`` sampled tokens; returns ``(B, T + max_new_tokens)``.

        ``temperature=0`` is greedy (argmax); otherwise the logits are divided by ``temperature``,
        optionally cut to the ``top_k`` largest, and one token is drawn with ``generator``.
        Runs in eval mode (no dropout) and restores the previous mode.
        """
        check_tensor("ids", ids, ndim=2)
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if ids.shape[1] + max_new_tokens > self.config.max_len:
            raise ValueError(f"a prompt of {ids.shape[1]} tokens plus {max_new_tokens} new tokens makes "
                             f"{ids.shape[1] + max_new_tokens}, more than max_len={self.config.max_len}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if top_k is not None and not 1 <= top_k <= self.config.vocab_size:
            raise ValueError(f"top_k must be in [1, {self.config.vocab_size}] (vocab_size), got {top_k}")
        was_training = self.training
        self.eval()
        try:
            cache = self.new_cache() if use_cache else None
            out = ids
            logits = self(ids, cache)[:, -1]  # (B, vocab_size)
            for step in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)  # (B, 1)
                out = torch.cat([out, nxt], dim=1)  # (B, T + step + 1)
                if step + 1 < max_new_tokens:  # the logits after the last token are never used
                    logits = (self(nxt, cache) if use_cache else self(out))[:, -1]
            return out
        finally:
            self.train(was_training)

    def save(self, path: str | Path, **extra) -> None:
        """Save config, weights and any extra JSON-able metadata (vocabulary, measured loss) to one file."""
        torch.save({"config": asdict(self.config), "state_dict": self.state_dict(), "extra": extra}, path)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu") -> tuple["GPT", dict]:
        """Load a model saved with :meth:`save`; returns ``(model in eval mode, extra)``."""
        blob = torch.load(path, map_location=map_location, weights_only=True)
        model = cls(GPTConfig(**blob["config"]))
        model.load_state_dict(blob["state_dict"])
        return model.eval(), blob.get("extra", {})


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """logits (B, V) -> next ids (B, 1): greedy at ``temperature=0``, else a draw from softmax(logits / temperature)
    restricted to the ``top_k`` largest logits when given."""
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator)  # (B, 1)
