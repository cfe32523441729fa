"""Generating text from a causal language model: choose the next token, append it, repeat.

Built in notebook 11 (greedy, temperature, top-k, the KV cache); :class:`CausalLM` gives the same
``generate`` to every decoder-only model of the series (:class:`attnlib.GPT` and the SmolLM2 of notebook 13).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_tensor
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
    """``generate`` for a model with ``forward(ids, cache=None) -> logits (B, T, V)``, ``new_cache()``,
    and the attributes ``max_len`` (the longest context it can read) and ``vocab_size``."""

    max_len: int
    vocab_size: int

    @torch.no_grad()
    def generate(self, ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 use_cache: bool = True, generator: torch.Generator | None = None) -> torch.Tensor:
        """Extend ``ids (B, T)`` by ``max_new_tokens`` chosen tokens; returns ``(B, T + max_new_tokens)``.

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
        with eval_mode(self):
            out, window = ids, self.max_len
            cache = self.new_cache() if use_cache else None
            logits = self(ids[:, -window:], cache)[:, -1]  # (B, V): the prompt, cropped to the context
            for step in range(max_new_tokens):
                nxt = sample_next(logits, temperature, top_k, generator)  # (B, 1)
                out = torch.cat([out, nxt], dim=1)  # (B, T + step + 1)
                if step + 1 == max_new_tokens:  # the logits after the last token are never used
                    break
                if cache is None:
                    logits = self(out[:, -window:])[:, -1]
                elif len(cache[0]) < window:
                    logits = self(nxt, cache)[:, -1]  # one new token; the past comes from the cache
                else:  # the cache is full: read the last max_len tokens again, into a fresh cache
                    cache = self.new_cache()
                    logits = self(out[:, -window:], cache)[:, -1]
            return out
