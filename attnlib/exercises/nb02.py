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


def _as_float(got, right: torch.Tensor):
    """``got`` detached and in ``right``'s dtype when it is a floating-point tensor (a right answer in float64 is
    right), else ``got`` unchanged."""
    if isinstance(got, torch.Tensor) and got.is_floating_point():
        return got.detach().to(right.dtype)
    return got


def _weights_problem(got, right, key_padding_mask, B: int, T: int, L: int) -> str | None:
    """What is wrong with weights ``got`` (B, T, L) against ``right``, or None."""
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (B, L, T):
        return "your weights are (B, L, T); the steps come second and the keys last: (B, T, L)"
    problem = tensor_problem(got, (B, T, L), what="the weights (B, T, L)")
    if problem:
        return problem
    got = _as_float(got, right)
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
    got = _as_float(got, right)
    if not torch.allclose(got, right, atol=1e-5):
        return False, f"the weights differ from AdditiveAttention's step by step: {_WRONG_SCORE}"
    if projections.vectors > B * L and projections.count > 1:
        return False, (f"the weights are right, but the keys were projected {projections.count} times (with att.W_h's "
                       "weight): their half of the score does not change between steps, so project them once, before "
                       "the steps, and give every step the projection")
    if projections.vectors > B * L:
        return False, (f"the weights are right, but your keys were projected for every step: the projection held "
                       f"{projections.vectors} key vectors, not the B * L = {B * L} keys. Project the keys (B, L, Dk) "
                       "themselves once, with no copy per step, and let every step reuse the result")
    return True, (f"every step's weights equal AdditiveAttention's, and the check saw the keys projected with att.W_h's "
                  f"weight no more than once for the {T} steps")


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
    got = _as_float(got, right)
    if not torch.allclose(got, right, atol=1e-5):
        with torch.no_grad():
            no_tanh = att.v(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None]).squeeze(-1)
        if torch.allclose(got, no_tanh.masked_fill(~key_padding_mask[:, None], float("-inf")).softmax(-1), atol=1e-5):
            return False, "the tanh is missing: score = v . tanh(W_s s + W_h h + b)"
        return False, f"the weights differ from AdditiveAttention's step by step: {_WRONG_SCORE}"
    counts = {name: len(sizes) for name, sizes in calls.items()}
    never = [f"att.{name}" for name, n in counts.items() if n == 0]
    if never:
        return False, (f"the weights are right, but {' and '.join(never)} {'was' if len(never) == 1 else 'were'} never "
                       "called (the check counts calls of the layers, not uses of their weights): apply each layer "
                       "itself, once, on all the steps together, e.g. att.v(hidden)")
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


def _year_rows(top: torch.Tensor, data, fmt, where) -> torch.Tensor:
    """Per format f (index f of a tensor of N_DATE_FORMATS), the share of the century rows (outputs 0 and 1, or
    only ``rows``) of the format-f dates whose argmax passes ``where(i, p, start, end)``, with (start, end) the
    year's input span; NaN for a format with no date."""
    from attnlib.dates import N_DATE_FORMATS

    hits, rows = torch.zeros(N_DATE_FORMATS, dtype=torch.float64), torch.zeros(N_DATE_FORMATS, dtype=torch.float64)
    for i, span in enumerate(data.spans):
        start, end = span["year"]
        for p in (0, 1):
            if where(i, p, start, end) is None:
                continue
            rows[int(fmt[i])] += 1
            hits[int(fmt[i])] += bool(where(i, p, start, end))
    return hits / rows


def tens_digit_truth(top: torch.Tensor, data, fmt) -> torch.Tensor:
    """Per format (N_DATE_FORMATS,): the share of the century rows (outputs 0 and 1) whose argmax is the year's
    tens digit, the character before the year's last one (input end - 2 of the year's span)."""
    return _year_rows(top, data, fmt, lambda i, p, start, end: int(top[i, p]) == end - 2)


def _fake_dates():
    """Made-up test data: three dates in every format, and made-up argmax positions for their century rows, each
    drawn (with a fixed seed) from the year's four candidates, the input's first character and <eos>."""
    import datetime as dt

    from attnlib.dates import N_DATE_FORMATS

    first = dt.date(1950, 1, 1)
    dates = [((first + dt.timedelta(days=(7919 * k) % 36524)).isoformat(), k // 3) for k in range(3 * N_DATE_FORMATS)]
    data = _date_data(dates)
    fmt = torch.tensor([f for _, f in dates])
    g = torch.Generator().manual_seed(3)
    top = torch.zeros(len(dates), 11, dtype=torch.long)  # (N, T): the made-up argmax of every output character
    for i, (text, span) in enumerate(zip(data.src_raw, data.spans)):
        start, end = span["year"]
        candidates = torch.tensor([start, start + 1, end - 2, end - 1, 0, len(text)])
        top[i, :2] = candidates[torch.randint(len(candidates), (2,), generator=g)]
    return top, data, fmt


def _as_shares(got) -> tuple[torch.Tensor | None, str | None]:
    """The learner's answer as a float tensor (N_DATE_FORMATS,), or a sentence saying why it is not one."""
    from attnlib.dates import N_DATE_FORMATS

    if isinstance(got, dict):
        if set(got) != set(range(N_DATE_FORMATS)):
            return None, f"your dict has keys {sorted(got)!r}; give one share per format, 0 to {N_DATE_FORMATS - 1}"
        got = [got[f] for f in range(N_DATE_FORMATS)]
    try:
        if isinstance(got, (list, tuple)):
            got = torch.tensor([float(x) for x in got], dtype=torch.float64)
        else:
            got = torch.as_tensor(got).detach().to(torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return None, (f"expected your function to return {N_DATE_FORMATS} shares (a tensor or a list, format f at "
                      f"index f), got {type(got).__name__}")
    if got.dim() == 0:
        return None, (f"you gave one number; give one share per format: {N_DATE_FORMATS} of them, format f at index f")
    if tuple(got.shape) != (N_DATE_FORMATS,):
        return None, (f"expected {N_DATE_FORMATS} shares (one per format, format f at index f), got shape "
                      f"{tuple(got.shape)}")
    return got, None


@checker("2.3")
def tens_digit_share(answer, top: torch.Tensor, data, fmt: torch.Tensor) -> tuple[bool, str]:
    """``answer(top (N, T), data, fmt (N,)) -> (N_DATE_FORMATS,)``: for every format f, the share of the century rows
    (output positions 0 and 1) of the format-f dates whose argmax is the year's tens digit.

    Run on made-up dates and argmax positions (three dates in every format), and on the notebook's own ``top``,
    ``data`` and ``fmt``."""
    require(callable_problem(answer, "a function tens_digit_share(top, data, fmt)"))
    # a format's shares are multiples of 1 / (2 n), n <= 111 dates here, so two of them differ by 0.0045 or more:
    # atol 2e-3 still tells them apart and lets a right answer in float16 or bfloat16 (rounded by < 0.002) pass
    same = lambda a, b: torch.allclose(a, b, atol=2e-3, equal_nan=True)  # noqa: E731
    for name, (t, d, f) in {"the made-up dates": _fake_dates(), "this model's maps": (top, data, fmt)}.items():
        try:
            got = answer(t, d, f)
        except Exception as err:  # noqa: BLE001  the learner's own code failed
            return False, (f"your function raised {err.__class__.__name__}: {err}; it gets top (N, T), data (data.src_raw, "
                           "the input texts; data.spans, each field's (start, end) input span) and fmt (N,), the "
                           "format of each date: use these, not the notebook's variables")
        got, problem = _as_shares(got)
        require(problem)
        truth = tens_digit_truth(t, d, f)
        if same(got, truth):
            continue
        at = lambda rule, rows=(0, 1): _year_rows(t, d, f, lambda i, p, s, e: rule(int(t[i, p]), s, e) if p in rows else None)  # noqa: E731
        if (got[~got.isnan()] > 1).any():
            return False, "give shares between 0 and 1, not counts or percentages"
        if same(got, at(lambda x, s, e: x == 6)):
            return False, ("input 6 is the tens digit of the year only where the year is written last with two digits "
                           "(27.11.31); find the year of each date through data.spans")
        if same(got, at(lambda x, s, e: x == s)):
            return False, "that is the year's first character, which is its tens digit only when the year has two digits"
        if same(got, at(lambda x, s, e: x == e - 1)):
            return False, "that is the year's last digit (the 1 of 31); the tens digit is the one before it (the 3)"
        if same(got, at(lambda x, s, e: s <= x < e)):
            return False, "you counted every character of the year; count only its tens digit"
        if same(got, at(lambda x, s, e: x == e - 2, (0,))) or same(got, at(lambda x, s, e: x == e - 2, (1,))):
            return False, "the century has two output rows (positions 0 and 1); count both"
        if (got.nan_to_num(0.0).abs() < 1e-3).all():  # the right shares are not all 0 here (checked above)
            return False, ("no century row matched in any format: top holds input positions (integers), so compare "
                           "them with the input position of the year's tens digit (from data.spans), not with a "
                           "character or a digit")
        over_all = tens_digit_truth(t, d, [0] * len(d.spans))[0]  # the share over all dates, formats pooled
        if same(got, over_all.expand_as(truth)) and not same(got, truth):
            return False, "every format got the same share: entry f must count only the dates in format f (fmt == f)"
        wrong = [k for k in range(len(truth)) if not same(got[k:k + 1], truth[k:k + 1])]
        return False, (f"on {name} your share is not right for format(s) {', '.join(map(str, wrong))}: the share of "
                       "that format's century rows whose argmax is the year's tens digit")
    counts = torch.bincount(fmt.long(), minlength=len(tens_digit_truth(top, data, fmt)))
    return True, (f"your function gives every format's share of century rows on the tens digit "
                  f"({int(counts.min())} to {int(counts.max())} dates per format here)")
