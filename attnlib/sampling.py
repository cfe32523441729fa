"""Generating text from a causal language model: choose the next token, append it, repeat.

Built in notebook 11 (greedy, temperature, top-k, the KV cache); :class:`CausalLM` gives the same
``generate`` to every decoder-only model of the series (:class:`attnlib.GPT` and the SmolLM2 of notebook 13).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_tensor, shape_of
from .multihead import KVCache
from .runtime import eval_mode


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


class CausalLM:
    """``generate`` and the input checks of a decoder-only model with ``forward(ids, cache=None) -> logits (B, T, V)``
    and ``new_cache()`` (one :class:`attnlib.KVCache` per layer), and the attributes ``max_len`` (the longest
    context it can read), ``vocab_size``, ``num_layers`` and ``num_heads``."""

    max_len: int
    vocab_size: int
    num_layers: int
    num_heads: int

    def check_inputs(self, ids: torch.Tensor, cache: list | None, head_mask: torch.Tensor | None) -> int:
        """Raise ValueError for inputs that do not fit; return the position of the first new token."""
        check_tensor("ids", ids, ndim=2)
        if ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"ids must be integer token ids of shape (B, T), got dtype {ids.dtype}")
        if ids.shape[1] == 0:
            raise ValueError(f"ids has shape {shape_of(ids)}; it needs at least one token")
        V = self.vocab_size
        if ids.min() < 0 or ids.max() >= V:
            raise ValueError(f"ids must lie in [0, {V - 1}] (vocab_size={V}), "
                             f"got values from {ids.min().item()} to {ids.max().item()}")
        start = 0
        if cache is not None:
            if not isinstance(cache, list) or len(cache) != self.num_layers or \
                    not all(isinstance(c, KVCache) for c in cache):
                raise ValueError(f"cache must be model.new_cache(): a list of {self.num_layers} KVCache, "
                                 f"got {type(cache).__name__}")
            start = len(cache[0])
            held = cache[0].k
            if held is not None and held.shape[0] != ids.shape[0]:
                raise ValueError(f"ids has batch size {ids.shape[0]} but the cache was filled with batch size "
                                 f"{held.shape[0]}")
        if start + ids.shape[1] > self.max_len:
            raise ValueError(f"ids has shape {shape_of(ids)} and the cache holds {start} tokens: {start + ids.shape[1]} "
                             f"positions in all, but max_len is {self.max_len}")
        if head_mask is not None:
            check_tensor("head_mask", head_mask, ndim=2)
            want = (self.num_layers, self.num_heads)
            if shape_of(head_mask) != want:
                raise ValueError(f"head_mask has shape {shape_of(head_mask)} but it must be (layers, heads) = {want}")
        return start

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True, generator: torch.Generator | None = None,
                 stop_id: int | None = None) -> torch.Tensor:
        """Extend ``ids (B, T)`` by ``max_new_tokens`` chosen tokens; returns ``(B, T + max_new_tokens)``.

        With ``stop_id`` (an end-of-answer token such as SmolLM2's ``<|im_end|>``), generation ends early once
        every sequence has produced it; a sequence that ended continues with ``stop_id`` only.

        ``temperature=0`` is greedy (argmax); otherwise the logits are divided by ``temperature``,
        optionally cut to the ``top_k`` largest, and one token is drawn with ``generator``. The model
        reads at most the last ``max_len`` tokens (the context is cropped, as nanoGPT does), so any
        length can be generated. With ``use_cache`` each new token is read once, its keys and values
        kept; once the cache is full, each step re-reads the last ``max_len`` tokens into a fresh one,
        which gives exactly the tokens of ``use_cache=False``. Runs in eval mode (no dropout) and
        restores the previous mode.
        """
        check_tensor("ids", ids, ndim=2)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if top_k is not None and not 1 <= top_k <= self.vocab_size:
            raise ValueError(f"top_k must be in [1, {self.vocab_size}] (vocab_size), got {top_k}")
        if stop_id is not None and not 0 <= stop_id < self.vocab_size:
            raise ValueError(f"stop_id must be a token id in [0, {self.vocab_size - 1}], got {stop_id}")
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        with eval_mode(self):
            out, window = ids, self.max_len
            cache = self.new_cache() if use_cache else None
            logits = self(ids[:, -window:], cache)[:, -1]  # (B, V): the prompt, cropped to the context
            for step in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)  # (B, 1)
                if stop_id is not None:
                    nxt = nxt.masked_fill(done[:, None], stop_id)  # a finished sequence only repeats stop_id
                    done = done | (nxt[:, 0] == stop_id)
                out = torch.cat([out, nxt], dim=1)  # (B, T + step + 1)
                if step + 1 == max_new_tokens or bool(done.all()):  # the logits after the last token are never used
                    break
                if cache is None:
                    logits = self(out[:, -window:])[:, -1]
                elif len(cache[0]) < window:
                    logits = self(nxt, cache)[:, -1]  # one new token; the past comes from the cache
                else:  # the cache is full: read the last max_len tokens again, into a fresh cache
                    cache = self.new_cache()
                    logits = self(out[:, -window:], cache)[:, -1]
            return out
