"""Checkers for notebook 05's exercises (one head by hand, a previous-token head wired by hand, a window mask per head)."""
from __future__ import annotations

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


class _WeightsOnly:
    """A projection whose attributes (``weight``, ``bias``, ``out_features``, ...) read as usual; running it raises."""

    def __init__(self, linear, name):
        self._linear, self._name = linear, name

    def _refuse(self, *args, **kwargs):
        raise RuntimeError(f"slice mha.{self._name}.weight and .bias instead of calling mha.{self._name}")

    __call__ = _refuse

    def __getattr__(self, attr):  # only for names not set above: everything else the nn.Linear has
        if attr == "forward":
            return self._refuse
        return getattr(self._linear, attr)


class _NoCalls:
    """A MultiHeadAttention whose attributes read as usual (num_heads, d_k, w_q.weight, ...); running it or its
    projections raises (the exercise builds a head by hand)."""

    def __init__(self, mha):
        self._mha = mha
        self.w_q, self.w_k = _WeightsOnly(mha.w_q, "w_q"), _WeightsOnly(mha.w_k, "w_k")
        self.w_v, self.w_o = _WeightsOnly(mha.w_v, "w_v"), _WeightsOnly(mha.w_o, "w_o")

    def _refuse(self, *args, **kwargs):
        raise RuntimeError("build head j from mha.w_q and mha.w_k instead of calling mha")

    __call__ = _refuse

    def __getattr__(self, attr):
        if attr == "forward":
            return self._refuse
        return getattr(self._mha, attr)


def _head_weights(mha, x: torch.Tensor, j: int, scale: float | None = None, bias: bool = True, dim: int = -1,
                  columns: bool = False) -> torch.Tensor:
    """Head j's weights, or one of the usual mistakes: another scale, no bias, the softmax over the queries
    (``dim=-2``), or the head's slice taken from the columns of the (out, in) weight (``columns=True``)."""
    d_k = mha.d_k
    rows = slice(j * d_k, (j + 1) * d_k)
    w_q, w_k = (mha.w_q.weight[:, rows], mha.w_k.weight[:, rows]) if columns else (mha.w_q.weight[rows].T,
                                                                                   mha.w_k.weight[rows].T)
    q = x @ w_q + (mha.w_q.bias[rows] if bias else 0)  # (B, T, d_k)
    k = x @ w_k + (mha.w_k.bias[rows] if bias else 0)
    return (q @ k.transpose(-2, -1) / (scale or d_k**0.5)).softmax(dim)  # (B, T, T)


@checker("5.1")
def head_by_hand(answer) -> tuple[bool, str]:
    """``answer(mha, x (B, T, d_model), j) -> (B, T, T)``: head j's attention weights, from mha's weights."""
    from attnlib.multihead import MultiHeadAttention

    require(callable_problem(answer, "a function head_weights(mha, x, j)"))
    g = torch.Generator().manual_seed(0)
    for d, h, j in ((12, 3, 1), (16, 4, 3), (16, 4, 0)):
        with torch.random.fork_rng(devices=[]):  # building the layer draws from the global generator: not the learner's
            mha = MultiHeadAttention(d, h)
        with torch.no_grad():
            for p in mha.parameters():
                p.normal_(0, 0.5, generator=g)  # biases too, so that forgetting them shows
            x = torch.randn(2, 5, d, generator=g)
            right = mha(x, x, x)[1][:, j]  # (B, T, T)
            try:
                got = answer(_NoCalls(mha), x.clone(), j)
            except RuntimeError as err:
                if str(err).startswith("slice mha."):
                    return False, ("the exercise builds head j from the weight matrices themselves: "
                                   + str(err).split(" instead")[0] + " instead of calling the projection")
                if "instead of calling mha" in str(err):
                    return False, "build head j from mha.w_q and mha.w_k (weight and bias) instead of calling mha"
                raise
            require(tensor_problem(got, (2, 5, 5), what=f"head_weights(mha, x, {j}) for x of shape (2, 5, {d})"))
            if not got.is_floating_point():
                return False, f"expected floating-point weights, got dtype {got.dtype}"
            got = got.detach().to(right.dtype)  # float64 answers are fine: compared in the layer's float32
            if torch.allclose(got, right, atol=1e-5):
                continue
            if torch.allclose(got, right.transpose(-2, -1), atol=1e-5):
                return False, "the map is transposed: row i is query i, so the weights are softmax(q k^T) over the last axis"
            if torch.allclose(got, _head_weights(mha, x, j, scale=d**0.5), atol=1e-5):
                return False, "divide by the square root of the head's width d_k = d_model / h, not of d_model"
            if torch.allclose(got, _head_weights(mha, x, j, scale=1.0), atol=1e-5):
                return False, "the scores are not scaled: divide q k^T by the square root of the head's width before the softmax"
            if torch.allclose(got, _head_weights(mha, x, j, dim=-2), atol=1e-5):
                return False, "the softmax runs over the wrong axis: each query's row (the last axis, the keys) must sum to 1"
            if h > 1 and torch.allclose(got, _head_weights(mha, x, j, columns=True), atol=1e-5):
                return False, ("nn.Linear stores its weight as (out_features, in_features): a head's outputs are "
                               "rows of mha.w_q.weight, not columns")
            if torch.allclose(got, _head_weights(mha, x, j, bias=False), atol=1e-5):
                return False, "the projections have biases: take the same slice of mha.w_q.bias and mha.w_k.bias"
            if any(torch.allclose(got, right_other, atol=1e-5) for right_other in
                   (mha(x, x, x)[1][:, i] for i in range(h) if i != j)):
                return False, f"that is another head's map, not head {j}'s: which outputs of W_Q belong to head {j}?"
            return False, (f"head {j} of a {h}-head layer with d_model = {d}: the weights differ from head {j}'s; "
                           f"which outputs of W_Q and W_K belong to head {j}?")
    return True, "head j is rows j*d_k .. (j+1)*d_k - 1 of W_Q and W_K, scaled by the square root of d_k"


@checker("5.2")
def previous_token_head(answer, T: int = 8, threshold: float = 0.9) -> tuple[bool, str]:
    """``answer = (W_Q, W_K)``, each (T, d_k): on one-hot positions, every query 1..T-1 puts >= 0.9 on the key before it."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return False, "expected a pair (W_Q, W_K) of tensors"
    w_q, w_k = answer
    for name, w in (("W_Q", w_q), ("W_K", w_k)):
        if not isinstance(w, torch.Tensor):
            return False, f"expected {name} to be a torch.Tensor, got {type(w).__name__}"
        if w.ndim != 2 or w.shape[0] != T:
            return False, f"expected {name} to have shape (T, d_k) = ({T}, d_k), got {tuple(w.shape)}"
    if w_q.shape != w_k.shape:
        return False, f"W_Q and W_K must have the same shape (T, d_k), got {tuple(w_q.shape)} and {tuple(w_k.shape)}"
    x = torch.eye(T)  # (T, T): token i is the one-hot vector e_i
    w_q, w_k = w_q.detach().float(), w_k.detach().float()
    weights = ((x @ w_q) @ (x @ w_k).T / w_q.shape[1] ** 0.5).softmax(-1)  # (T, T)
    queries = torch.arange(1, T)
    on_previous = weights[queries, queries - 1]  # (T - 1,)
    if bool((on_previous >= threshold).all()):
        return True, f"every query puts at least {threshold:.0%} of its weight on the token before it"
    best = weights[queries].argmax(-1)  # (T - 1,) the key each query likes most
    if bool((best[:-1] == queries[:-1] + 1).all()):
        return False, "the queries look at the NEXT token: key j should match query j + 1, not j - 1"
    if bool((best == queries).all()):
        return False, "every token looks at itself: the score must be high where key = query - 1"
    if bool((best == queries - 1).all()):
        low = on_previous.min().item()
        return False, (f"the right key wins everywhere, but some query puts only {low:.2f} of its weight there: "
                       "make the winning score larger against the others (scale the matrices up)")
    wrong = int(queries[best != queries - 1][0])
    return False, f"query {wrong} likes key {int(best[wrong - 1])} most, not key {wrong - 1} (the token before it)"


def _window(h: int, T: int) -> torch.Tensor:
    i = torch.arange(T)
    return (i[:, None] - i[None, :]).abs()[None, None] <= torch.arange(h)[None, :, None, None]  # (1, h, T, T)


@checker("5.3")
def window_mask(answer) -> tuple[bool, str]:
    """``answer(h, T) -> (1, h, T, T)`` bool mask: head j lets query i see key k when |i - k| <= j."""
    require(callable_problem(answer, "a function window_mask(h, T)"))
    for h, T in ((4, 6), (2, 7), (3, 3)):
        got = answer(h, T)
        require(tensor_problem(got, (1, h, T, T), what=f"window_mask({h}, {T})"))
        if got.dtype != torch.bool:
            return False, f"expected a bool mask (True = may attend), got {got.dtype}"
        right = _window(h, T)
        if torch.equal(got, right):
            continue
        i = torch.arange(T)
        dist = (i[:, None] - i[None, :]).abs()[None, None]
        heads = torch.arange(h)[None, :, None, None]
        if torch.equal(got, ~right):
            return False, "the polarity is inverted: True means 'may attend'"
        if torch.equal(got, dist < heads):
            return False, "head 0 sees nothing at all: every query must at least see itself (distance 0)"
        if torch.equal(got, dist == heads):
            return False, "head j sees only the keys exactly j away: it should see every key up to j away"
        signed = (i[:, None] - i[None, :])[None, None]
        if torch.equal(got, (signed >= 0) & (signed <= heads)) or torch.equal(got, (signed <= 0) & (-signed <= heads)):
            return False, "the window covers one side only: |i - k| counts keys on both sides of the query"
        bad = [j for j in range(h) if not torch.equal(got[0, j], right[0, j])]
        return False, f"window_mask({h}, {T}): head {bad[0]} does not see exactly the keys within {bad[0]} of each query"
    return True, "one (T, T) window per head: head j sees every key up to j positions away, on both sides"
