"""Attention for RNN decoders: Bahdanau (additive) and Luong (dot / general / concat) scores.

At each decoder step one query (the decoder state, ``(B, Dq)``) scores every encoder
output (the keys, ``(B, L, Dk)``); a softmax over the scores gives the weights, and the
context is the weighted sum of the keys (they are also the values here).

Both modules share one signature, so a decoder can take either:
``forward(query, keys, key_padding_mask=None, keys_proj=None, need_weights=True)
-> (context (B, Dk), weights (B, L) or None)``. The key half of a score does not change between
decoder steps, so ``project_keys(keys)`` computes it once per sequence; pass the result as
``keys_proj``.

``key_padding_mask`` is bool ``(B, L)``, True = a real key. Padded keys get weight exactly 0; a
row with every key padded gets zero weights and a zero context, never NaN.

Built in notebook 02 (Bahdanau, section 1) and notebook 03 (Luong's three scores, section 1).
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_bool_mask, check_positive_int, check_same_batch, check_tensor, shape_of
from .attention import masked_softmax  # the package's one masked softmax, also importable from here

__all__ = ["AdditiveAttention", "LuongAttention", "masked_softmax"]


class _RNNAttention(nn.Module):
    """Shared checks and the weighted sum; subclasses define ``project_keys`` and ``score``."""

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        check_positive_int("query_dim", query_dim)
        check_positive_int("key_dim", key_dim)
        self.query_dim, self.key_dim = query_dim, key_dim

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The part of the score that depends on the keys only; ``(B, L, *)``. Reuse it every step."""
        return keys

    def score(self, query: torch.Tensor, keys_proj: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, L)`` of ``query (B, Dq)`` against the projected keys; each score class defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define score()")

    def _check(self, query, keys, key_padding_mask, keys_proj) -> None:
        check_tensor("query", query, ndim=2)
        check_tensor("keys", keys, ndim=3)
        if query.shape[-1] != self.query_dim:
            raise ValueError(f"query has shape {shape_of(query)} but query_dim is {self.query_dim}; expected (B, {self.query_dim})")
        if keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys has shape {shape_of(keys)} but key_dim is {self.key_dim}; expected (B, L, {self.key_dim})")
        check_same_batch("query", query, "keys", keys)
        if key_padding_mask is not None:  # True = a real key
            check_bool_mask(key_padding_mask, tuple(keys.shape[:2]), "(B, L)", name="key_padding_mask")
        if keys_proj is not None and tuple(keys_proj.shape[:2]) != tuple(keys.shape[:2]):
            raise ValueError(
                f"keys_proj has shape {shape_of(keys_proj)} but keys has shape {shape_of(keys)}; "
                "compute it with project_keys(keys)"
            )

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        keys_proj: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` ``(B, Dq)`` over ``keys`` ``(B, L, Dk)``.

        Args:
            key_padding_mask: optional bool ``(B, L)``, True = a real key.
            keys_proj: optional ``project_keys(keys)``, to skip recomputing it each step.
            need_weights: False returns None in place of the weights.

        Returns:
            ``(context (B, Dk), weights (B, L))``; each row of weights sums to 1 (or is all 0).
        """
        self._check(query, keys, key_padding_mask, keys_proj)
        if keys_proj is None:
            keys_proj = self.project_keys(keys)
        weights = masked_softmax(self.score(query, keys_proj), key_padding_mask)  # (B, L)
        context = torch.bmm(weights.unsqueeze(1), keys).squeeze(1)  # (B, 1, L) @ (B, L, Dk) -> (B, Dk)
        return context, weights if need_weights else None

    def attend(self, query: torch.Tensor, keys: torch.Tensor, keys_proj: torch.Tensor,
               key_padding_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` without its checks, for a decoder's time loop: ``(context (B, Dk), weights (B, L))``.

        The caller checks the shapes once per sequence and passes ``keys_proj``. Every row must
        have at least one real key (an encoder refuses an empty source), so a plain softmax over
        the scores with the padding at ``-inf`` is safe, and ``key_padding_mask`` may be None when
        no key is padded: then no masking work is done at all.
        """
        scores = self.score(query, keys_proj)  # (B, L)
        if key_padding_mask is not None:
            scores = scores.masked_fill(~key_padding_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, L)
        return torch.bmm(weights.unsqueeze(1), keys).squeeze(1), weights  # (B, Dk), (B, L)


class AdditiveAttention(_RNNAttention):
    """Bahdanau attention: ``score(s, h) = vᵀ tanh(W_s s + W_h h)``.

    Parameters: ``W_s`` ``(attn_dim, query_dim)``, ``W_h`` ``(attn_dim, key_dim)`` plus a bias
    of ``attn_dim``, and ``v`` ``(attn_dim,)``.
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__(query_dim, key_dim)
        check_positive_int("attn_dim", attn_dim)
        self.W_s = nn.Linear(query_dim, attn_dim, bias=False)
        self.W_h = nn.Linear(key_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """``W_h h`` for every key: ``(B, L, attn_dim)``."""
        return self.W_h(keys)

    def score(self, query: torch.Tensor, keys_proj: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.W_s(query).unsqueeze(1) + keys_proj)  # (B, L, attn_dim)
        return self.v(hidden).squeeze(-1)  # (B, L)


class LuongAttention(_RNNAttention):
    """Luong attention with one of three scores.

    * ``"dot"``: ``sᵀ h`` (no parameters; needs ``query_dim == key_dim``).
    * ``"general"``: ``sᵀ W h`` with ``W`` ``(query_dim, key_dim)``.
    * ``"concat"``: ``vᵀ tanh(W [s; h])`` with ``W`` ``(attn_dim, query_dim + key_dim)``
      (``attn_dim`` defaults to ``query_dim``).
    """

    METHODS = ("dot", "general", "concat")

    def __init__(self, query_dim: int, key_dim: int, method: str = "general", attn_dim: int | None = None):
        super().__init__(query_dim, key_dim)
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
        self.method = method
        if method == "dot" and query_dim != key_dim:
            raise ValueError(
                f"the dot score needs query_dim == key_dim, got query_dim={query_dim} and key_dim={key_dim}; "
                "use method='general' or 'concat'"
            )
        if method == "general":
            self.W = nn.Linear(key_dim, query_dim, bias=False)  # W h, so that sᵀ (W h) = sᵀ W h
        elif method == "concat":
            attn_dim = query_dim if attn_dim is None else attn_dim
            check_positive_int("attn_dim", attn_dim)
            self.W = nn.Linear(query_dim + key_dim, attn_dim, bias=False)
            self.v = nn.Linear(attn_dim, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """dot: ``h``; general: ``W h`` ``(B, L, Dq)``; concat: the key columns of ``W`` times ``h``."""
        if self.method == "dot":
            return keys
        if self.method == "general":
            return self.W(keys)
        return keys @ self.W.weight[:, self.query_dim :].T  # W [s; h] = W_s s + W_h h

    def score(self, query: torch.Tensor, keys_proj: torch.Tensor) -> torch.Tensor:
        if self.method == "concat":
            q = query @ self.W.weight[:, : self.query_dim].T  # (B, attn_dim)
            return self.v(torch.tanh(q.unsqueeze(1) + keys_proj)).squeeze(-1)
        return torch.bmm(keys_proj, query.unsqueeze(-1)).squeeze(-1)  # (B, L, Dq) @ (B, Dq, 1) -> (B, L)

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, method={self.method!r}"
