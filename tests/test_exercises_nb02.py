"""Notebook 02's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import datetime as dt

import pytest
import torch

from attnlib import format_date
from attnlib.dates import N_DATE_FORMATS
from attnlib.exercises import check
from attnlib.exercises.nb02 import _date_data, _fake_dates, tens_digit_truth


def right_weights(att, query, keys, key_padding_mask):
    scores = att.v(torch.tanh(att.W_s(query)[:, None, :] + att.W_h(keys))).squeeze(-1)  # (B, L)
    return scores.masked_fill(~key_padding_mask, float("-inf")).softmax(-1)


def right_all_steps(att, queries, keys, key_padding_mask):
    hidden = torch.tanh(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None])
    return att.v(hidden).squeeze(-1).masked_fill(~key_padding_mask[:, None], float("-inf")).softmax(-1)


def steps_from(att, queries, keys_proj, key_padding_mask):  # every step's weights from projected keys, one step at a time
    steps = []
    for t in range(queries.shape[1]):
        scores = att.v(torch.tanh(att.W_s(queries[:, t])[:, None] + keys_proj)).squeeze(-1)
        steps.append(scores.masked_fill(~key_padding_mask, float("-inf")).softmax(-1))
    return torch.stack(steps, 1)


def keys_once_layers(att, queries, keys, key_padding_mask):  # the layers, with the keys projected once
    return steps_from(att, queries, att.W_h(keys), key_padding_mask)


def keys_once_project_keys(att, queries, keys, key_padding_mask):  # the module's own helper, once
    return steps_from(att, queries, att.project_keys(keys), key_padding_mask)


def keys_once_by_hand(att, queries, keys, key_padding_mask):  # the keys projected once with the weight and bias
    return steps_from(att, queries, keys @ att.W_h.weight.T + att.W_h.bias, key_padding_mask)


def keys_once_flat(att, queries, keys, key_padding_mask):  # once, on the keys flattened to (B * L, Dk)
    B, L, Dk = keys.shape
    return steps_from(att, queries, att.W_h(keys.reshape(B * L, Dk)).reshape(B, L, -1), key_padding_mask)


def module_keys_once(att, queries, keys, key_padding_mask):  # the module, with the keys projected once
    proj = att.project_keys(keys)
    return torch.stack([att(queries[:, t], keys, key_padding_mask, keys_proj=proj)[1]
                        for t in range(queries.shape[1])], 1)


def module_each_step(att, queries, keys, key_padding_mask):  # calls att itself at every step: W_h runs T times
    return torch.stack([att(queries[:, t], keys, key_padding_mask)[1] for t in range(queries.shape[1])], 1)


def layers_each_step(att, queries, keys, key_padding_mask):  # a loop over the steps, W_h each time
    return torch.stack([right_weights(att, queries[:, t], keys, key_padding_mask) for t in range(queries.shape[1])], 1)


def keys_repeated(att, queries, keys, key_padding_mask):  # one call of W_h, on a copy of the keys per step
    B, T, L = queries.shape[0], queries.shape[1], keys.shape[1]
    proj = att.W_h(keys.repeat(1, T, 1)).view(B, T, L, -1)
    return torch.cat([steps_from(att, queries[:, t:t + 1], proj[:, t], key_padding_mask) for t in range(T)], 1)


def keys_expanded(att, queries, keys, key_padding_mask):  # one call of W_h, on the keys expanded over the steps
    B, T, L, Dk = *queries.shape[:2], *keys.shape[1:]
    proj = att.W_h(keys[:, None].expand(B, T, L, Dk))  # (B, T, L, A): T copies of every key projected
    return torch.cat([steps_from(att, queries[:, t:t + 1], proj[:, t], key_padding_mask) for t in range(T)], 1)


def keys_once_transposed(att, queries, keys, key_padding_mask):  # once, by hand, with the keys transposed
    proj = (att.W_h.weight @ keys.transpose(1, 2)).transpose(1, 2) + att.W_h.bias  # (B, L, A)
    return steps_from(att, queries, proj, key_padding_mask)


def by_hand_each_step(att, queries, keys, key_padding_mask):  # the weight taken once, but the keys projected every step
    W, b = att.W_h.weight.T, att.W_h.bias
    steps = [steps_from(att, queries[:, t:t + 1], keys @ W + b, key_padding_mask) for t in range(queries.shape[1])]
    return torch.cat(steps, 1)


def keys_once_float64(att, queries, keys, key_padding_mask):  # right, with the softmax taken in float64
    key_part = att.W_h(keys)
    steps = [att.v(torch.tanh(att.W_s(queries[:, t])[:, None] + key_part)).squeeze(-1)
             .masked_fill(~key_padding_mask, float("-inf")).softmax(-1, dtype=torch.float64) for t in range(queries.shape[1])]
    return torch.stack(steps, 1)


def numpy_each_step(att, queries, keys, key_padding_mask):  # the keys projected in numpy at every step: unseen by torch
    steps = []
    for t in range(queries.shape[1]):
        proj = torch.from_numpy(keys.numpy() @ att.W_h.weight.detach().numpy().T) + att.W_h.bias
        steps.append(steps_from(att, queries[:, t:t + 1], proj, key_padding_mask))
    return torch.cat(steps, 1)


@pytest.mark.parametrize("wrong, says", [
    (module_each_step, "calls att itself"),
    (module_keys_once, "calls att itself"),
    (lambda att, q, k, kpm: layers_each_step(att, q, k, kpm).double(), "projected 4 times"),
    (lambda att, q, k, kpm: keys_once_layers(att, q, k, torch.ones_like(kpm)).double(), "masked keys"),
    (lambda att, q, k, kpm: steps_from(att, q, k @ att.W_h.weight.T, kpm).double(), "differ"),
    (layers_each_step, "projected 4 times"),
    (by_hand_each_step, "projected 4 times"),
    (keys_repeated, "projected for every step"),
    (keys_expanded, "projected for every step"),
    (lambda att, q, k, kpm: keys_once_layers(att, q, k, kpm).transpose(1, 2), "(B, L, T)"),
    (lambda att, q, k, kpm: keys_once_layers(att, q, k, torch.ones_like(kpm)), "masked keys"),  # the mask left out
    (lambda att, q, k, kpm: keys_once_layers(att, q[:, :1].expand_as(q), k, kpm), "first step"),
    (lambda att, q, k, kpm: keys_once_layers(att, q, k, kpm).transpose(0, 1), "shape"),
    (lambda att, q, k, kpm: right_weights(att, q[:, 0], k, kpm), "shape"),
    (lambda att, q, k, kpm: steps_from(att, q, k @ att.W_h.weight.T, kpm), "differ"),  # the bias left out
    (3, "function"),
])
def test_21_rejects(wrong, says):
    verdict = check("2.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("right", [keys_once_layers, keys_once_project_keys, keys_once_by_hand, keys_once_flat,
                                   keys_once_transposed, right_all_steps, keys_once_float64,
                                   lambda att, q, k, kpm: keys_once_layers(att, q, k, kpm).double()])
def test_21_accepts(right):
    verdict = check("2.1", right, quiet=True)
    assert verdict, verdict.message


def test_21_message_says_what_was_measured():  # numpy hides the projections from the check: it claims no more than it saw
    verdict = check("2.1", numpy_each_step, quiet=True)
    assert "no more than once" in verdict.message and "projected once" not in verdict.message, verdict.message


@pytest.mark.parametrize("wrong, says", [
    (module_each_step, "calls att itself"),
    (lambda att, q, k, kpm: att(q[:, 0], k, kpm)[1][:, None].expand(-1, q.shape[1], -1), "calls att itself"),
    (layers_each_step, "no loop over the steps"),
    (keys_once_layers, "no loop over the steps"),
    (lambda att, q, k, kpm: torch.stack([att.v(torch.tanh(att.W_s(q)[:, t, None] + att.W_h(k))).squeeze(-1)
                                         .masked_fill(~kpm, float("-inf")).softmax(-1) for t in range(q.shape[1])], 1),
     "no loop over the steps"),
    (lambda att, q, k, kpm: right_all_steps(att, q, k, kpm).transpose(1, 2), "(B, L, T)"),
    (lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1)
     .masked_fill(~kpm[:, None], float("-inf")).softmax(1), "over the steps"),
    (lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1).softmax(-1),
     "masked keys"),
    (lambda att, q, k, kpm: right_all_steps(att, q[:, :1].expand_as(q), k, kpm), "first step"),
    (lambda att, q, k, kpm: att.v(att.W_s(q)[:, :, None] + att.W_h(k)[:, None]).squeeze(-1)
     .masked_fill(~kpm[:, None], float("-inf")).softmax(-1), "tanh"),
    (lambda att, q, k, kpm: right_weights(att, q[:, 0], k, kpm), "shape"),
    (lambda att, q, k, kpm: att.W_s(q) + att.W_h(k), "size-1 axis"),
    # one pass, no loop, but a layer applied through its weight: the message must not speak of a loop
    (lambda att, q, k, kpm: (torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None]) @ att.v.weight.T).squeeze(-1)
     .masked_fill(~kpm[:, None], float("-inf")).softmax(-1), "att.v was never called"),
    (lambda att, q, k, kpm: att.v(torch.tanh(torch.einsum("btd,ad->bta", q, att.W_s.weight)[:, :, None]
                                             + att.W_h(k)[:, None])).squeeze(-1)
     .masked_fill(~kpm[:, None], float("-inf")).softmax(-1), "att.W_s was never called"),
    (lambda att, q, k, kpm: layers_each_step(att, q, k, kpm).double(), "no loop over the steps"),
    (lambda att, q, k, kpm: right_all_steps(att, q, k, kpm).double().softmax(1), "over the steps"),
    # each query projected once per key: one call of att.W_s, but on B * T * L vectors
    (lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q[:, :, None].expand(-1, -1, k.shape[1], -1))
                                             + att.W_h(k)[:, None])).squeeze(-1)
     .masked_fill(~kpm[:, None], float("-inf")).softmax(-1), "not the B * T = 12 queries"),
    # each key projected once per step: one call of att.W_h, but on B * T * L vectors
    (lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k[:, None].expand(-1, q.shape[1], -1, -1))))
     .squeeze(-1).masked_fill(~kpm[:, None], float("-inf")).softmax(-1), "projected for every step"),
    (3, "function"),
])
def test_22_rejects(wrong, says):
    verdict = check("2.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def queries_4d(att, queries, keys, key_padding_mask):  # the step axis made before W_s: its input is (B, T, 1, Dq)
    hidden = torch.tanh(att.W_s(queries[:, :, None, :]) + att.W_h(keys)[:, None])
    return att.v(hidden).squeeze(-1).masked_fill(~key_padding_mask[:, None], float("-inf")).softmax(-1)


def queries_flat(att, queries, keys, key_padding_mask):  # W_s on the queries flattened to (B * T, Dq)
    B, T, Dq = queries.shape
    query_part = att.W_s(queries.reshape(B * T, Dq)).reshape(B, T, 1, -1)
    hidden = torch.tanh(query_part + att.W_h(keys)[:, None])
    return att.v(hidden).squeeze(-1).masked_fill(~key_padding_mask[:, None], float("-inf")).softmax(-1)


@pytest.mark.parametrize("right", [
    right_all_steps,
    queries_4d,
    queries_flat,
    lambda att, q, k, kpm: right_all_steps(att, q, k, kpm).double(),
    lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1)
    .masked_fill(~kpm[:, None], float("-inf")).softmax(-1, dtype=torch.float64),
    lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q).unsqueeze(2) + att.W_h(k).unsqueeze(1)))
    .squeeze(-1).masked_fill(~kpm.unsqueeze(1), float("-inf")).softmax(dim=-1),
])
def test_22_accepts(right):
    verdict = check("2.2", right, quiet=True)
    assert verdict, verdict.message


# Twenty test dates written by format_date, two in every format, and argmax positions for their century rows.
DAYS = [("2031-11-27", "1999-02-01"), ("2004-03-02", "1971-06-05"), ("2001-05-01", "1958-12-31"),
        ("1960-05-01", "2049-07-19"), ("2012-10-10", "1987-04-23"), ("2020-02-29", "1966-08-08"),
        ("2044-01-15", "1950-03-03"), ("1993-09-30", "2027-06-11"), ("1979-11-02", "2038-05-24"),
        ("2015-12-25", "1962-10-01")]
FMT = torch.tensor([f for f in range(N_DATE_FORMATS) for _ in range(2)])
DATA = _date_data([(day, f) for f, pair in enumerate(DAYS) for day in pair])
TOP = torch.zeros(len(FMT), 11, dtype=torch.long)
for i, span in enumerate(DATA.spans):  # each date's century rows on (tens digit, first year character), then swapped
    start, end = span["year"]
    TOP[i, :2] = torch.tensor([end - 2, start] if i % 2 == 0 else [start + 1, end - 2])
TOP[4, :2] = torch.tensor([0, 0])  # a 4-digit-year date whose century rows weight the start of the input
TOP[19, :2] = torch.tensor([len(DATA.src_raw[19]), 0])  # ... and <eos>


def year_span(data):
    return torch.tensor([span["year"] for span in data.spans])  # (N, 2): start, end


def per_format(hit, fmt):  # hit (N, 2) bool -> (N_DATE_FORMATS,) shares
    return torch.stack([hit[fmt == f].float().mean() for f in range(N_DATE_FORMATS)])


def right_share(top, data, fmt):
    tens = year_span(data)[:, 1] - 2                                    # (N,): the year's tens digit
    return per_format(top[:, :2] == tens[:, None], fmt)


def right_share_loop(top, data, fmt):  # a loop over the dates, a dict of Python floats
    hits, rows = {f: 0 for f in range(N_DATE_FORMATS)}, {f: 0 for f in range(N_DATE_FORMATS)}
    for i, (text, span) in enumerate(zip(data.src_raw, data.spans)):
        tens = span["year"][1] - 2
        hits[int(fmt[i])] += sum(int(top[i, p]) == tens for p in (0, 1))
        rows[int(fmt[i])] += 2
    return {f: hits[f] / rows[f] for f in hits}


def right_share_half(top, data, fmt):  # float16: the shares are rounded to about 3 significant digits
    return right_share(top, data, fmt).half()


def right_share_bfloat16(top, data, fmt):  # bfloat16: about 2 significant digits
    return right_share(top, data, fmt).bfloat16()


def share_of_characters(top, data, fmt):  # compares each argmax position with a character of the text: never equal
    hits = torch.zeros(N_DATE_FORMATS)
    for i, (text, span) in enumerate(zip(data.src_raw, data.spans)):
        hits[int(fmt[i])] += sum(top[i, p] == text[span["year"][1] - 2] for p in (0, 1))
    return hits / (2 * torch.bincount(fmt, minlength=N_DATE_FORMATS))


def right_share_round_trip(top, data, fmt):  # the formats found again from the texts, a list
    found = [next(f for f in range(N_DATE_FORMATS) if format_date(dt.date.fromisoformat(t), f)[0] == s)
             for s, t in zip(data.src_raw, data.tgt_raw)]
    return right_share(top, data, torch.tensor(found)).tolist()


def test_23_test_data_is_real_dates():
    assert [format_date(dt.date.fromisoformat(t), int(f))[0] for t, f in zip(DATA.tgt_raw, FMT)] == DATA.src_raw
    assert DATA.src_raw[2:4] == ["02.03.04", "05.06.71"] and [s["year"] for s in DATA.spans[2:4]] == [(6, 8), (6, 8)]


def test_23_fake_dates_of_the_checker():
    top, data, fmt = _fake_dates()
    assert torch.bincount(fmt).tolist() == [3] * N_DATE_FORMATS
    assert [format_date(dt.date.fromisoformat(t), int(f))[0] for t, f in zip(data.tgt_raw, fmt)] == data.src_raw
    truth = tens_digit_truth(top, data, fmt)
    assert not (truth[0] == truth).all() and (truth <= 1).all()  # the shares differ between formats


def wrong_at(rule, rows=(0, 1)):  # shares per format of the rows whose argmax passes rule(position, start, end)
    def share(top, data, fmt):
        start, end = year_span(data).T
        hit = torch.stack([rule(top[:, p], start, end) for p in rows], 1)
        return per_format(hit, fmt)
    return share


@pytest.mark.parametrize("wrong, says", [
    (wrong_at(lambda x, s, e: x == 6), "input 6"),
    (wrong_at(lambda x, s, e: x == s), "first character"),
    (wrong_at(lambda x, s, e: x == e - 1), "last digit"),
    (wrong_at(lambda x, s, e: (s <= x) & (x < e)), "every character of the year"),
    (wrong_at(lambda x, s, e: x == e - 2, (0,)), "count both"),
    (wrong_at(lambda x, s, e: x == e - 2, (1,)), "count both"),
    (lambda top, data, fmt: right_share(top, data, torch.zeros_like(fmt)).nan_to_num().max().repeat(N_DATE_FORMATS),
     "same share"),  # the share over all dates, given to every format
    (lambda top, data, fmt: right_share(top, data, fmt).roll(1), "not right for format"),  # formats in the wrong order
    (lambda top, data, fmt: right_share(top, data, fmt) * 2 * torch.bincount(fmt, minlength=N_DATE_FORMATS), "counts"),
    (lambda top, data, fmt: right_share(top, data, fmt) * 100, "percentages"),
    (share_of_characters, "no century row matched"),  # compares positions with characters: nothing ever matches
    (lambda top, data, fmt: torch.zeros(N_DATE_FORMATS), "no century row matched"),
    (lambda top, data, fmt: [0.25] * N_DATE_FORMATS, "not right for format"),  # a constant that is not the pooled share
    (lambda top, data, fmt: right_share(top, data, fmt).mean(), "one number"),
    (lambda top, data, fmt: right_share(top, data, fmt)[1:], "shape"),
    (lambda top, data, fmt: {1: 0.5}, "keys"),
    (lambda top, data, fmt: data.targets, "raised"),  # no such attribute: the message says what the data has
    (lambda top, data, fmt: "half", "shares"),
    (2 / 3, "function"),
])
def test_23_rejects(wrong, says):
    verdict = check("2.3", wrong, quiet=True, top=TOP, data=DATA, fmt=FMT)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("right", [right_share, right_share_loop, right_share_round_trip, right_share_half,
                                   right_share_bfloat16])
def test_23_accepts(right):
    verdict = check("2.3", right, quiet=True, top=TOP, data=DATA, fmt=FMT)
    assert verdict, verdict.message
