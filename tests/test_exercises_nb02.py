"""Notebook 02's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from attnlib.exercises import check


def right_weights(att, query, keys, mask):
    scores = att.v(torch.tanh(att.W_s(query)[:, None, :] + att.W_h(keys))).squeeze(-1)  # (B, L)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


@pytest.mark.parametrize("wrong, says", [
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, None] + att.W_h(k))).squeeze(-1), "sum to 1"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, None] + att.W_h(k))).squeeze(-1).softmax(-1), "masked keys"),
    (lambda att, q, k, m: att.v(att.W_s(q)[:, None] + att.W_h(k)).squeeze(-1).masked_fill(~m, float("-inf")).softmax(-1),
     "tanh"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, None] + att.W_h(k))).squeeze(-1).masked_fill(~m, float("-inf")).softmax(0),
     "sum to 1"),
])
def test_21_rejects(wrong, says):
    verdict = check("2.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_21_accepts():
    assert check("2.1", right_weights, quiet=True)


def right_all_steps(att, queries, keys, mask):
    hidden = torch.tanh(att.W_s(queries)[:, :, None] + att.W_h(keys)[:, None])
    return att.v(hidden).squeeze(-1).masked_fill(~mask[:, None], float("-inf")).softmax(-1)


def looped_all_steps(att, queries, keys, mask):  # a loop over the steps: the checker cannot tell, so it passes
    return torch.stack([right_weights(att, queries[:, t], keys, mask) for t in range(queries.shape[1])], 1)


@pytest.mark.parametrize("wrong, says", [
    (lambda att, q, k, m: right_all_steps(att, q, k, m).transpose(1, 2), "(B, L, T)"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1)
     .masked_fill(~m[:, None], float("-inf")).softmax(1), "over the steps"),
    (lambda att, q, k, m: att.v(torch.tanh(att.W_s(q)[:, :, None] + att.W_h(k)[:, None])).squeeze(-1).softmax(-1),
     "masked keys"),
    (lambda att, q, k, m: right_all_steps(att, q[:, :1].expand_as(q), k, m), "first step"),
    (lambda att, q, k, m: att.v(att.W_s(q)[:, :, None] + att.W_h(k)[:, None]).squeeze(-1)
     .masked_fill(~m[:, None], float("-inf")).softmax(-1), "tanh"),
    (lambda att, q, k, m: right_weights(att, q[:, 0], k, m), "shape"),
    (lambda att, q, k, m: att.W_s(q) + att.W_h(k), "broadcasting"),
    (3, "function"),
])
def test_22_rejects(wrong, says):
    verdict = check("2.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


@pytest.mark.parametrize("right", [right_all_steps, looped_all_steps])
def test_22_accepts(right):
    assert check("2.2", right, quiet=True)


# Four test dates: two in format 1 (dd.mm.yy), two written out. Targets start with the century digits.
DATA = SimpleNamespace(src_raw=["27.11.31", "may 1, 2001", "01.02.99", "1 may 1960", "02.03.04"],
                       tgt=torch.tensor([[3, 4, 5], [3, 3, 4], [2, 10, 10], [2, 10, 7], [3, 3, 3]]))
IDS = torch.tensor([[3, 4, 5],    # format 1, century right
                    [3, 3, 4],    # right, but not format 1
                    [2, 11, 10],  # format 1, second century digit wrong
                    [2, 10, 7],   # right, not format 1
                    [3, 3, 3]])   # format 1, right


def fmt1(data):
    return [i for i, t in enumerate(data.src_raw) if len(t) == 8 and t[2] == "." and t[5] == "."]


def right_share(ids, data):
    rows = fmt1(data)
    return sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in rows) / len(rows)


@pytest.mark.parametrize("wrong, says", [
    (lambda ids, data: sum(int(ids[i, 0]) == int(data.tgt[i, 0]) for i in fmt1(data)) / len(fmt1(data)), "first digit"),
    (lambda ids, data: sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in range(len(data.src_raw))) / len(data.src_raw),
     "all dates"),
    (lambda ids, data: sum(ids[i, :2].tolist() == data.tgt[i, :2].tolist() for i in fmt1(data)), "not a count"),
    (lambda ids, data: 1.0, "does not give"),   # the number this model happens to reach, typed in
    (2 / 3, "function"),
])
def test_23_rejects(wrong, says):
    verdict = check("2.3", wrong, quiet=True, ids=IDS, data=DATA)
    assert verdict.ok is False and says in verdict.message


def test_23_accepts():
    assert check("2.3", right_share, quiet=True, ids=IDS, data=DATA)
    assert check("2.3", lambda ids, data: torch.tensor(right_share(ids, data)), quiet=True, ids=IDS, data=DATA)
