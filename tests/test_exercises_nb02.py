"""Notebook 02's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import datetime as dt

import pytest
import torch

from attnlib import format_date

from attnlib.exercises import check
from attnlib.exercises.nb02 import _date_data


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


@pytest.mark.parametrize("wrong, says", [
    (module_each_step, "calls att itself"),
    (module_keys_once, "calls att itself"),
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
                                   keys_once_transposed, right_all_steps])
def test_21_accepts(right):
    verdict = check("2.1", right, quiet=True)
    assert verdict, verdict.message


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
    lambda att, q, k, kpm: att.v(torch.tanh(att.W_s(q).unsqueeze(2) + att.W_h(k).unsqueeze(1)))
    .squeeze(-1).masked_fill(~kpm.unsqueeze(1), float("-inf")).softmax(dim=-1),
])
def test_22_accepts(right):
    verdict = check("2.2", right, quiet=True)
    assert verdict, verdict.message


# Five test dates written by format_date: three in format 1 (dd.mm.yy, the tens digit of the year at input 6).
DATA = _date_data([("2031-11-27", 1), ("2001-05-01", 2), ("1999-02-01", 1), ("1960-05-01", 3), ("2004-03-02", 1)])
TOP = torch.tensor([[6, 6, 0],    # 27.11.31, format 1: both century rows on the tens digit
                    [6, 6, 0],    # May 1, 2001, not format 1
                    [7, 0, 0],    # 01.02.99, format 1: the units digit, then the day
                    [6, 6, 0],    # 1 may 1960, not format 1
                    [6, 7, 0]])   # 02.03.04, format 1: tens, then units      -> 3 of 6 century rows on the tens digit


def fmt1(data):
    return [i for i, t in enumerate(data.src_raw) if len(t) == 8 and t[2] == "." and t[5] == "."]


def right_share(top, data):
    rows = fmt1(data)
    return sum(int(top[i, p]) == 6 for i in rows for p in (0, 1)) / (2 * len(rows))


def right_share_spans(top, data):  # the tens digit found through the spans, the count through len(data)
    hits, n = 0, 0
    for i in range(len(data)):
        text = data.src_raw[i]
        if text.count(".") == 2 and len(text) == 8:
            tens = data.spans[i]["year"][0]
            hits += int((top[i, :2] == tens).sum())
            n += 2
    return torch.tensor(hits / n)


def right_share_round_trip(top, data):  # format 1 found as section 4 finds formats: write the target date again
    rows = [i for i, (s, t) in enumerate(zip(data.src_raw, data.tgt_raw))
            if format_date(dt.date.fromisoformat(t), 1)[0] == s]
    return (top[rows][:, :2] == 6).float().mean()


def test_23_fake_data_is_real_dates():
    assert DATA.src_raw == ["27.11.31", "May 1, 2001", "01.02.99", "1 may 1960", "02.03.04"]
    assert [s["year"] for s in DATA.spans] == [(6, 8), (7, 11), (6, 8), (6, 10), (6, 8)]


@pytest.mark.parametrize("wrong, says", [
    (lambda top, data: sum(int(top[i, p]) in (6, 7) for i in fmt1(data) for p in (0, 1)) / (2 * len(fmt1(data))), "whole two-digit year"),
    (lambda top, data: sum(int(top[i, p]) == 7 for i in fmt1(data) for p in (0, 1)) / (2 * len(fmt1(data))), "last digit"),
    (lambda top, data: sum(int(top[i, 0]) == 6 for i in fmt1(data)) / len(fmt1(data)), "count both"),
    (lambda top, data: sum(int(top[i, p]) == 6 for i in range(len(data.src_raw)) for p in (0, 1)) / (2 * len(data.src_raw)),
     "all dates"),
    (lambda top, data: sum(int(top[i, p]) == 6 for i in fmt1(data) for p in (0, 1)), "not a count"),
    (lambda top, data: 0.3, "does not give"),   # a number typed in
    (lambda top, data: data.targets, "raised"),  # no such attribute: the message says what the data has
    (lambda top, data: "half", "a number"),
    (2 / 3, "function"),
])
def test_23_rejects(wrong, says):
    verdict = check("2.3", wrong, quiet=True, top=TOP, data=DATA)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("right", [right_share, right_share_spans, right_share_round_trip])
def test_23_accepts(right):
    assert check("2.3", right, quiet=True, top=TOP, data=DATA)
