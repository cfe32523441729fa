"""Checkers for notebook 02's exercises (Bahdanau attention)."""
from __future__ import annotations

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


def _additive_problem(seed: int, query_shape: tuple[int, ...]):
    """An ``AdditiveAttention(6, 10, attn_dim=5)``, queries ``(*query_shape, 6)``, keys ``(3, 7, 10)`` and a
    ``(3, 7)`` padding mask whose rows keep 7, 4 and 2 keys."""
    from attnlib.rnn_attention import AdditiveAttention

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    att = AdditiveAttention(6, 10, attn_dim=5)
    queries, keys = torch.randn(*query_shape, 6, generator=g), torch.randn(3, 7, 10, generator=g)
    mask = torch.arange(7) < torch.tensor([7, 4, 2])[:, None]  # (3, 7) True = a real key
    return att, queries, keys, mask


@checker("2.1")
def additive_weights_by_hand(answer) -> tuple[bool, str]:
    """``answer(att, query (B, Dq), keys (B, L, Dk), mask (B, L)) -> weights (B, L)`` from att.W_s, att.W_h, att.v."""
    require(callable_problem(answer, "a function additive_weights(att, query, keys, mask)"))
    att, query, keys, mask = _additive_problem(seed=0, query_shape=(3,))
    with torch.no_grad():
        _, right = att(query, keys, mask)
        got = answer(att, query, keys, mask)
    require(tensor_problem(got, (3, 7), what="the weights"))
    got = got.detach()
    if torch.isnan(got).any():
        return False, "your weights contain NaN; fill masked scores with -inf only where the mask is False"
    if not torch.allclose(got.sum(-1), torch.ones(3), atol=1e-5):
        return False, "each row of weights must sum to 1: apply a softmax over the keys (the last axis)"
    if (got[~mask] > 1e-6).any():
        return False, "masked keys (the padding) get weight: set their scores to -inf before the softmax"
    if not torch.allclose(got, right, atol=1e-5):
        with torch.no_grad():
            no_tanh = att.v(att.W_s(query)[:, None] + att.W_h(keys)).squeeze(-1)
        if torch.allclose(got, no_tanh.masked_fill(~mask, float("-inf")).softmax(-1), atol=1e-5):
            return False, "the tanh is missing: score = v . tanh(W_s s + W_h h)"
        return False, "the weights differ from AdditiveAttention's: score = v . tanh(W_s s + W_h h), then a masked softmax"
    return True, "your weights equal AdditiveAttention's"


@checker("2.2")
def all_step_weights(answer) -> tuple[bool, str]:
    """``answer(att, queries (B, T, Dq), keys (B, L, Dk), mask (B, L)) -> weights (B, T, L)``, all steps at once."""
    require(callable_problem(answer, "a function all_step_weights(att, queries, keys, mask)"))
    B, T, L = 3, 4, 7
    att, queries, keys, mask = _additive_problem(seed=1, query_shape=(B, T))
    with torch.no_grad():
        right = torch.stack([att(queries[:, t], keys, mask)[1] for t in range(T)], 1)  # (B, T, L)
        try:
            got = answer(att, queries, keys, mask)
        except RuntimeError as err:
            return False, f"your function raised {err.__class__.__name__}: {str(err).splitlines()[0]} (check the broadcasting: queries (B, T, 1, A) against keys (B, 1, L, A))"
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (B, L, T):
        return False, "your weights are (B, L, T); the steps come second and the keys last: (B, T, L)"
    require(tensor_problem(got, (B, T, L), what="the weights (B, T, L)"))
    got = got.detach()
    over_steps = got.nan_to_num(0.0).sum(1)  # (B, L): 1 at every real key if the softmax ran over the steps
    if torch.allclose(over_steps[mask], torch.ones(int(mask.sum())), atol=1e-5):
        return False, "your softmax runs over the steps (dim 1); each step's weights are a distribution over the keys (the last axis)"
    if torch.isnan(got).any():
        return False, "your weights contain NaN; fill masked scores with -inf only where the mask is False"
    if not torch.allclose(got.sum(-1), torch.ones(B, T), atol=1e-5):
        return False, "each step's weights must sum to 1 over the keys: a softmax over the last axis"
    if (got.masked_select(~mask[:, None, :].expand(B, T, L)) > 1e-6).any():
        return False, "masked keys (the padding) get weight: the mask (B, L) needs a step axis, mask[:, None, :], before masked_fill"
    if torch.allclose(got, right[:, :1].expand(B, T, L), atol=1e-5):
        return False, "every step got the first step's weights: use all T queries"
    if not torch.allclose(got, right, atol=1e-5):
        with torch.no_grad():
            no_tanh = att.v(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None]).squeeze(-1)
        if torch.allclose(got, no_tanh.masked_fill(~mask[:, None], float("-inf")).softmax(-1), atol=1e-5):
            return False, "the tanh is missing: score = v . tanh(W_s s + W_h h)"
        return False, "the weights differ from AdditiveAttention's step by step: score = v . tanh(W_s s_t + W_h h), then a masked softmax over the keys"
    return True, "every step's weights equal AdditiveAttention's, in one call"


def format1_century(ids: torch.Tensor, data) -> tuple[list[int], float]:
    """The test dates written like 27.11.31 and the share of them whose first two output digits are right."""
    fmt1 = [i for i, text in enumerate(data.src_raw) if len(text) == 8 and text[2] == "." and text[5] == "."]
    right = sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in fmt1)
    return fmt1, right / max(len(fmt1), 1)


@checker("2.3")
def century_accuracy(answer, ids: torch.Tensor, data) -> tuple[bool, str]:
    """``answer(ids (N, T), data) -> float``: the share of format-1 dates (dd.mm.yy) whose century is right.

    Run on made-up outputs where some centuries are wrong, and on the notebook's own ``ids`` and ``data``."""
    from types import SimpleNamespace

    require(callable_problem(answer, "a function century_share(ids, data)"))
    # made up: four dates in format 1 (two centuries right, one wrong in each digit), two written out, both right
    fake = SimpleNamespace(src_raw=["27.11.31", "may 1, 2001", "01.02.99", "1 may 1960", "02.03.04", "05.06.71"],
                           tgt=torch.tensor([[3, 4, 5], [3, 3, 4], [2, 10, 10], [2, 10, 7], [3, 3, 3], [2, 10, 8]]))
    fake_ids = torch.tensor([[3, 4, 5], [3, 3, 4], [2, 11, 10], [2, 10, 7], [2, 3, 3], [2, 10, 8]])
    for name, (i, d) in {"made-up outputs": (fake_ids, fake), "this model's outputs": (ids, data)}.items():
        try:
            got = float(answer(i, d))
        except (TypeError, ValueError) as err:
            return False, f"expected your function to return a number (a share between 0 and 1): {err}"
        fmt1, truth = format1_century(i, d)
        if abs(got - truth) < 1e-6:
            continue
        everyone = sum(i[k, :2].tolist() == d.tgt[k, :2].tolist() for k in range(len(d.src_raw))) / len(d.src_raw)
        first_only = sum(int(i[k, 0]) == int(d.tgt[k, 0]) for k in fmt1) / max(len(fmt1), 1)
        if abs(got - everyone) < 1e-6:
            return False, "that is over all dates; keep only those written like 27.11.31, where the century is not in the input"
        if abs(got - first_only) < 1e-6:
            return False, "you compared only the first digit; the century is two digits (19 or 20)"
        if got > 1:
            return False, "give a share between 0 and 1, not a count"
        return False, f"on the {name} your function does not give the share of format-1 dates with the right century"
    fmt1, truth = format1_century(ids, data)
    return True, f"your function counts the format-1 dates ({len(fmt1)} here) and the share with the right century"
