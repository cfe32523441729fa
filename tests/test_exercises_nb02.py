"""Notebook 02's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check
from attnlib.exercises.nb02 import _FakeDates


def right_weights(att, query, keys, mask):
    scores = att.v(torch.tanh(att.W_s(query)[:, None, :] + att.W_h(keys))).squeeze(-1)  # (B, L)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def right_all_steps(att, queries, keys, mask):
    hidden = torch.tanh(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None])
    return att.v(hidden).squeeze(-1).masked_fill(~mask[:, None], float("-inf")).softmax(-1)


def keys_once_module(att, queries, keys, mask):  # the module, with the keys projected once
    proj = att.project_keys(keys)
    return torch.stack([att(queries[:, t], keys, mask, keys_proj=proj)[1] for t in range(queries.shape[1])], 1)


def keys_once_layers(att, queries, keys, mask):  # the layers, with the keys projected once
    proj = att.W_h(keys)
    steps = []
    for t in range(queries.shape[1]):
        scores = att.v(torch.tanh(att.W_s(queries[:, t])[:, None] + proj)).squeeze(-1)
        steps.append(scores.masked_fill(~mask, float("-inf")).softmax(-1))
    return torch.stack(steps, 1)


def module_each_step(att, queries, keys, mask):  # calls att itself at every step: W_h runs T times
    return torch.stack([att(queries[:, t], keys, mask)[1] for t in range(queries.shape[1])], 1)


def layers_each_step(att, queries, keys, mask):  # a loop over the steps, W_h each time
    return torch.stack([right_weights(att, queries[:, t], keys, mask) for t in range(queries.shape[1])], 1)


@pytest.mark.parametrize("wrong, says", [
    (module_each_step, "att.W_h ran 4 times"),
    (layers_each_step, "att.W_h ran 4 times"),
    (lambda att, q, k, m: keys_once_module(att, q, k, m).transpose(1, 2), "(B, L, T)"),
    (lambda att, q, k, m: keys_once_module(att, q, k, torch.ones_like(m)), "masked keys"),  # the mask left out
    (lambda att, q, k, m: keys_once_module(att, q[:, :1].expand_as(q), k, m), "first step"),
    (lambda att, q, k, m: keys_once_module(att, q, k, m).transpose(0, 1), "shape"),
    (lambda att, q, k, m: right_weights(att, q[:, 0], k, m), "shape"),
    (3, "function"),
])
def test_21_rejects(wrong, says):
    verdict = check("2.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("right", [keys_once_module, keys_once_layers, right_all_steps])
def test_21_accepts(right):
    assert check("2.1", right, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (module_each_step, "calls att itself"),
    (lambda att, q, k, m: att(q[:, 0], k, m)[1][:, None].expand(-1, q.shape[1], -1), "calls att itself"),
    (layers_each_step, "no loop over the steps"),
    (keys_once_layers, "no loop over the steps"),
    (lambda att, q, k, m: torch.stack([att.v(torch.tanh(att.W_s(q)[:, t, None] + att.W_h(k))).squeeze(-1)
                                       .masked_fill(~m, float("-inf")).softmax(-1) for t in range(q.shape[1])], 1),
     "no loop over the steps"),
    (lambda att, q, k, m: right_all_steps(att, q, k, m).transpose(1, 2), "(B, L, T)"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1)
     .masked_fill(~m[:, None], float("-inf")).softmax(1), "over the steps"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1).softmax(-1),
     "masked keys"),
    (lambda att, q, k, m: right_all_steps(att, q[:, :1].expand_as(q), k, m), "first step"),
    (lambda att, q, k, m: att.v(att.W_s(q)[:, :, None] + att.W_h(k)[:, None]).squeeze(-1)
     .masked_fill(~m[:, None], float("-inf")).softmax(-1), "tanh"),
    (lambda att, q, k, m: right_weights(att, q[:, 0], k, m), "shape"),
    (lambda att, q, k, m: att.W_s(q) + att.W_h(k), "size-1 axis"),
    (3, "function"),
])
def test_22_rejects(wrong, says):
    verdict = check("2.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_22_accepts():
    assert check("2.2", right_all_steps, quiet=True)
    assert check("2.2", lambda att, q, k, m: att.v(torch.tanh(att.W_s(q).unsqueeze(2) + att.W_h(k).unsqueeze(1)))
                 .squeeze(-1).masked_fill(~m.unsqueeze(1), float("-inf")).softmax(dim=-1), quiet=True)


# Five test dates: three in format 1 (dd.mm.yy, the tens digit of the year at input 6), two written out.
DATA = _FakeDates(["27.11.31", "may 1, 2001", "01.02.99", "1 may 1960", "02.03.04"])
TOP = torch.tensor([[6, 6, 0],    # format 1: both century rows on the tens digit
                    [6, 6, 0],    # not format 1
                    [7, 0, 0],    # format 1: the units digit, then the day
                    [6, 6, 0],    # not format 1
                    [6, 7, 0]])   # format 1: tens, then units      -> 3 of 6 century rows on the tens digit


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


@pytest.mark.parametrize("wrong, says", [
    (lambda top, data: sum(int(top[i, p]) in (6, 7) for i in fmt1(data) for p in (0, 1)) / (2 * len(fmt1(data))), "whole two-digit year"),
    (lambda top, data: sum(int(top[i, p]) == 7 for i in fmt1(data) for p in (0, 1)) / (2 * len(fmt1(data))), "last digit"),
    (lambda top, data: sum(int(top[i, 0]) == 6 for i in fmt1(data)) / len(fmt1(data)), "count both"),
    (lambda top, data: sum(int(top[i, p]) == 6 for i in range(len(data.src_raw)) for p in (0, 1)) / (2 * len(data.src_raw)),
     "all dates"),
    (lambda top, data: sum(int(top[i, p]) == 6 for i in fmt1(data) for p in (0, 1)), "not a count"),
    (lambda top, data: 0.3, "does not give"),   # a number typed in
    (lambda top, data: data.tgt[0], "raised"),  # the data has no targets here: the message says what it has
    (lambda top, data: "half", "a number"),
    (2 / 3, "function"),
])
def test_23_rejects(wrong, says):
    verdict = check("2.3", wrong, quiet=True, top=TOP, data=DATA)
    assert verdict.ok is False and says in verdict.message, verdict.message


@pytest.mark.parametrize("right", [right_share, right_share_spans])
def test_23_accepts(right):
    assert check("2.3", right, quiet=True, top=TOP, data=DATA)
