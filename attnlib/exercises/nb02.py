"""Checkers for notebook 02's exercises (Bahdanau attention)."""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from . import checker, require
from .nb00 import callable_problem, tensor_problem


def _additive_problem(seed: int, query_shape: tuple[int, ...]):
    """An ``AdditiveAttention(6, 10, attn_dim=5)``, queries ``(*query_shape, 6)``, keys ``(3, 7, 10)`` and a
    ``(3, 7)`` key_padding_mask whose rows keep 7, 4 and 2 keys."""
    from attnlib.rnn_attention import AdditiveAttention

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    att = AdditiveAttention(6, 10, attn_dim=5)
    queries, keys = torch.randn(*query_shape, 6, generator=g), torch.randn(3, 7, 10, generator=g)
    key_padding_mask = torch.arange(7) < torch.tensor([7, 4, 2])[:, None]  # (3, 7) True = a real key
    return att, queries, keys, key_padding_mask


class _ModuleCalled(Exception):
    """Raised by a forward pre-hook when an answer calls the attention module itself."""


@contextmanager
def _watch(att):
    """Record, for every call of att.W_s, att.W_h and att.v, how many vectors its input holds (its size over the
    last axis, whatever its rank); calling att itself raises _ModuleCalled."""
    calls = {"W_s": [], "W_h": [], "v": []}

    def record(name):
        return lambda module, args: calls[name].append(args[0].numel() // max(args[0].shape[-1], 1))

    def refuse(module, args):
        raise _ModuleCalled

    handles = [getattr(att, name).register_forward_pre_hook(record(name)) for name in calls]
    handles.append(att.register_forward_pre_hook(refuse))
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


class _KeyProjections(TorchFunctionMode):
    """Counts the torch operations that combine the keys with att.W_h's weight (one per projection, however it is
    written: att.W_h(keys), att.project_keys(keys), keys @ att.W_h.weight.T + att.W_h.bias, an einsum, ...) and how
    many key vectors those operations projected in all: a copy of the keys per step (keys.repeat, keys.expand)
    counts every copy. Views of the keys and of the weight made inside the answer (a transpose, a reshape, an
    expand) count as the keys and the weight themselves."""

    def __init__(self, weight: torch.Tensor, keys: torch.Tensor):
        super().__init__()
        self.weight_ids, self.key_ids = {id(weight)}, {id(keys)}
        self.kept = [weight, keys]  # held, so that no other tensor can take one of these ids during the check
        self.key_dim = keys.shape[-1]
        self.count = 0    # operations that projected keys
        self.vectors = 0  # key vectors projected by them (B * L for one projection of the keys)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [x for x in tree_flatten((args, kwargs or {}))[0] if isinstance(x, torch.Tensor)]
        of_weight = [id(x) in self.weight_ids for x in tensors]
        of_keys = [id(x) in self.key_ids for x in tensors]
        if any(of_weight) and any(of_keys):
            self.count += 1                      # a projection of the keys
            self.vectors += sum(x.numel() for x, k in zip(tensors, of_keys) if k) // max(self.key_dim, 1)
        elif tensors and all(of_weight):
            self._follow(out, self.weight_ids)   # e.g. att.W_h.weight.T
        elif tensors and all(of_keys):
            self._follow(out, self.key_ids)      # e.g. keys.reshape(B * L, Dk)
        return out

    def _follow(self, out, ids: set[int]) -> None:
        for x in tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor):
                ids.add(id(x))
                self.kept.append(x)


def _reference(att, queries, keys, key_padding_mask):
    """Every step's weights ``(B, T, L)`` from the module itself, one step at a time."""
    with torch.no_grad():
        return torch.stack([att(queries[:, t], keys, key_padding_mask)[1] for t in range(queries.shape[1])], 1)


_SIZES = (3, 4, 7)  # B, T, L of exercises 2.1 and 2.2


def _steps_problem(answer, name: str, seed: int):
    """Exercises 2.1 and 2.2: check that ``answer`` is a function, then ``(att, queries (B, T, 6), keys,
    key_padding_mask, every step's reference weights (B, T, L))``."""
    require(callable_problem(answer, f"a function {name}(att, queries, keys, key_padding_mask)"))
    att, queries, keys, key_padding_mask = _additive_problem(seed=seed, query_shape=_SIZES[:2])
    return att, queries, keys, key_padding_mask, _reference(att, queries, keys, key_padding_mask)


def _weights_problem(got, right, key_padding_mask, B: int, T: int, L: int) -> str | None:
    """What is wrong with weights ``got`` (B, T, L) against ``right``, or None."""
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (B, L, T):
        return "your weights are (B, L, T); the steps come second and the keys last: (B, T, L)"
    problem = tensor_problem(got, (B, T, L), what="the weights (B, T, L)")
    if problem:
        return problem
    got = got.detach()
    over_steps = got.nan_to_num(0.0).sum(1)  # (B, L): 1 at every real key if the softmax ran over the steps
    if torch.allclose(over_steps[key_padding_mask], torch.ones(int(key_padding_mask.sum())), atol=1e-5):
        return "your softmax runs over the steps (dim 1); each step's weights are a distribution over the keys (the last axis)"
    if torch.isnan(got).any():
        return "your weights contain NaN; fill masked scores with -inf only where key_padding_mask is False"
    if not torch.allclose(got.sum(-1), torch.ones(B, T), atol=1e-5):
        return "each step's weights must sum to 1 over the keys: a softmax over the last axis"
    if (got.masked_select(~key_padding_mask[:, None, :].expand(B, T, L)) > 1e-6).any():
        return ("masked keys (the padding) get weight: fill their scores with -inf where key_padding_mask is False, "
                "before the softmax (the mask is (B, L): scores with a step axis need it to have one too)")
    if torch.allclose(got, right[:, :1].expand(B, T, L), atol=1e-5):
        return "every step got the first step's weights: use all T queries"
    return None


_WRONG_SCORE = "score = v . tanh(W_s s_t + W_h h + b), then a masked softmax over the keys"


@checker("2.1")
def step_weights_keys_once(answer) -> tuple[bool, str]:
    """``answer(att, queries (B, T, Dq), keys (B, L, Dk), key_padding_mask (B, L)) -> weights (B, T, L)``, built
    from att.W_s, att.W_h and att.v without calling att, with the keys projected once for all the steps."""
    B, T, L, (att, queries, keys, key_padding_mask, right) = *_SIZES, _steps_problem(answer, "step_weights", seed=0)
    with torch.no_grad(), _watch(att), _KeyProjections(att.W_h.weight, keys) as projections:
        try:
            got = answer(att, queries, keys, key_padding_mask)
        except _ModuleCalled:
            return False, ("your function calls att itself; build each step's scores from att.W_s, att.W_h and att.v, "
                           "then a masked softmax")
    require(_weights_problem(got, right, key_padding_mask, B, T, L))
    if not torch.allclose(got.detach(), right, atol=1e-5):
        return False, f"the weights differ from AdditiveAttention's step by step: {_WRONG_SCORE}"
    if projections.vectors > B * L and projections.count > 1:
        return False, (f"the weights are right, but the keys were projected {projections.count} times (with att.W_h's "
                       "weight): their half of the score does not change between steps, so project them once, before "
                       "the steps, and give every step the projection")
    if projections.vectors > B * L:
        return False, (f"the weights are right, but your keys were projected for every step: the projection held "
                       f"{projections.vectors} key vectors, not the B * L = {B * L} keys. Project the keys (B, L, Dk) "
                       "themselves once, with no copy per step, and let every step reuse the result")
    return True, f"every step's weights equal AdditiveAttention's, with the keys projected once for {T} steps"


@checker("2.2")
def all_step_weights(answer) -> tuple[bool, str]:
    """``answer(att, queries (B, T, Dq), keys (B, L, Dk), key_padding_mask (B, L)) -> weights (B, T, L)``, all
    steps at once: att.W_s, att.W_h and att.v each called once, att itself never."""
    B, T, L, (att, queries, keys, key_padding_mask, right) = *_SIZES, _steps_problem(answer, "all_step_weights", seed=1)
    with torch.no_grad(), _watch(att) as calls:
        try:
            got = answer(att, queries, keys, key_padding_mask)
        except _ModuleCalled:
            return False, "your function calls att itself (one step at a time); build the scores from att.W_s, att.W_h and att.v"
        except RuntimeError as err:
            return False, (f"your function raised {err.__class__.__name__}: {str(err).splitlines()[0]} (the queries and "
                           "the keys each need a size-1 axis where the other has its steps or its positions)")
    require(_weights_problem(got, right, key_padding_mask, B, T, L))
    if not torch.allclose(got.detach(), right, atol=1e-5):
        with torch.no_grad():
            no_tanh = att.v(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None]).squeeze(-1)
        if torch.allclose(got, no_tanh.masked_fill(~key_padding_mask[:, None], float("-inf")).softmax(-1), atol=1e-5):
            return False, "the tanh is missing: score = v . tanh(W_s s + W_h h + b)"
        return False, f"the weights differ from AdditiveAttention's step by step: {_WRONG_SCORE}"
    counts = {name: len(sizes) for name, sizes in calls.items()}
    if counts != {"W_s": 1, "W_h": 1, "v": 1}:
        return False, (f"the weights are right, but the layers ran {counts['W_s']}, {counts['W_h']} and {counts['v']} times "
                       "(att.W_s, att.W_h, att.v): call each once, on all the steps together, with no loop over the steps")
    if calls["W_s"][0] != B * T:
        return False, (f"the weights are right, but att.W_s's one call held {calls['W_s'][0]} vectors, not the "
                       f"B * T = {B * T} queries: project each query once, then broadcast the result over the keys")
    if calls["W_h"][0] != B * L:
        return False, (f"the weights are right, but your keys were projected for every step: att.W_h's one call held "
                       f"{calls['W_h'][0]} vectors, not the B * L = {B * L} keys: project each key once, then broadcast "
                       "the result over the steps")
    return True, f"every step's weights equal AdditiveAttention's, each layer called once for all {T} steps"


def _date_data(dates: list[tuple[str, int]]):
    """Made-up test data, built like make_dates: each (YYYY-MM-DD, format) written with format_date, as a
    Seq2SeqData (src_raw, tgt_raw, spans, src, tgt, len) with make_dates' vocabularies."""
    import datetime as dt

    from attnlib.data import Seq2SeqData, Vocab
    from attnlib.dates import format_date

    written = [format_date(dt.date.fromisoformat(day), f) for day, f in dates]
    letters = "abcdefghijklmnopqrstuvwxyz"
    return Seq2SeqData.from_raw([text for text, _ in written], [day for day, _ in dates],
                                Vocab("0123456789" + letters + letters.upper() + " ,./-"), Vocab("0123456789-"),
                                [spans for _, spans in written])


def _format1(data) -> list[int]:
    return [i for i, text in enumerate(data.src_raw) if len(text) == 8 and text[2] == "." and text[5] == "."]


def tens_digit_truth(top: torch.Tensor, data) -> tuple[list[int], float]:
    """The dates written like 27.11.31, and the share of their century rows (outputs 0 and 1) whose argmax is input 6."""
    fmt1 = _format1(data)
    on_tens = sum(int(top[i, p]) == 6 for i in fmt1 for p in (0, 1))
    return fmt1, on_tens / max(2 * len(fmt1), 1)


@checker("2.3")
def tens_digit_share(answer, top: torch.Tensor, data) -> tuple[bool, str]:
    """``answer(top (N, T), data) -> float``: in format 1 (dd.mm.yy), the share of the century rows (output
    positions 0 and 1) whose argmax is the tens digit of the year (input position 6).

    Run on made-up argmax positions, and on the notebook's own ``top`` and ``data``."""
    require(callable_problem(answer, "a function tens_digit_share(top, data)"))
    fake = _date_data([("2031-11-27", 1), ("2001-05-01", 2), ("1999-02-01", 1), ("1960-05-01", 3), ("2004-03-02", 1),
                       ("1971-06-05", 1)])  # 27.11.31, May 1, 2001, 01.02.99, 1 may 1960, 02.03.04, 05.06.71
    fake_top = torch.zeros(6, 11, dtype=torch.long)  # (N, T): the made-up argmax position of every output character
    fake_top[:, :2] = torch.tensor([[6, 7], [6, 6], [6, 6], [6, 0], [7, 6], [6, 2]])  # 5 of the 8 century rows on input 6
    for name, (t, d) in {"the made-up argmax positions": (fake_top, fake), "this model's maps": (top, data)}.items():
        try:
            got = answer(t, d)
        except Exception as err:  # noqa: BLE001  the learner's own code failed
            return False, (f"your function raised {err.__class__.__name__}: {err}; it gets top (N, T) and data "
                           "(data.src_raw, the input texts; data.tgt_raw, the dates as YYYY-MM-DD; data.spans, each "
                           "field's input span; len(data))")
        try:
            got = float(got)
        except (TypeError, ValueError):
            return False, f"expected your function to return a number (a share between 0 and 1), got {type(got).__name__}"
        fmt1, truth = tens_digit_truth(t, d)
        if abs(got - truth) < 1e-6:
            continue
        rows = [(i, p) for i in fmt1 for p in (0, 1)]
        share = lambda hit, rows: sum(hit(i, p) for i, p in rows) / max(len(rows), 1)  # noqa: E731
        if got > 1:
            return False, "give a share between 0 and 1, not a count"
        if abs(got - share(lambda i, p: int(t[i, p]) in (6, 7), rows)) < 1e-6:
            return False, "you counted the whole two-digit year; only its tens digit (the 3 of 31) decides the century"
        if abs(got - share(lambda i, p: int(t[i, p]) == 7, rows)) < 1e-6:
            return False, "that is the last digit of the year; the century follows from the one before it"
        if abs(got - share(lambda i, p: int(t[i, p]) == 6, [(i, 0) for i in fmt1])) < 1e-6 or \
                abs(got - share(lambda i, p: int(t[i, p]) == 6, [(i, 1) for i in fmt1])) < 1e-6:
            return False, "the century has two output rows (positions 0 and 1); count both"
        everyone = [(i, p) for i in range(len(d.src_raw)) for p in (0, 1)]
        if abs(got - share(lambda i, p: int(t[i, p]) == 6, everyone)) < 1e-6:
            return False, "that is over all dates; keep only those written like 27.11.31 (a two-digit year)"
        return False, f"on {name} your function does not give the share of format-1 century rows whose argmax is the year's tens digit"
    fmt1, _ = tens_digit_truth(top, data)
    return True, f"your function finds the {len(fmt1)} format-1 dates here and the share of their century rows on the tens digit"
