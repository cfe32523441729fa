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


BATCH = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])


@pytest.mark.parametrize("wrong, says", [
    (BATCH == 0, "polarity"),
    (torch.ones(2, 5, dtype=torch.bool), "every position"),
    ((BATCH != 0).long(), "bool"),
    ((BATCH != 0)[:1], "shape"),
])
def test_22_rejects(wrong, says):
    verdict = check("2.2", wrong, quiet=True, batch=BATCH, pad_id=0)
    assert verdict.ok is False and says in verdict.message


def test_22_accepts():
    assert check("2.2", BATCH != 0, quiet=True, batch=BATCH, pad_id=0)


# Four test dates: two in format 1 (dd.mm.yy), two written out. Targets start with the century digits.
DATA = SimpleNamespace(src_raw=["27.11.31", "may 1, 2001", "01.02.99", "1 may 1960"],
                       tgt=torch.tensor([[3, 4, 5], [3, 3, 4], [2, 10, 10], [2, 10, 7]]))
IDS = torch.tensor([[3, 4, 5],    # format 1, century right
                    [3, 3, 4],    # right, but not format 1
                    [2, 11, 10],  # format 1, second century digit wrong
                    [2, 10, 7]])  # right, not format 1


@pytest.mark.parametrize("wrong, says", [(1.0, "first digit"), (0.75, "all test dates"), (2, "share")])
def test_23_rejects(wrong, says):
    verdict = check("2.3", wrong, quiet=True, ids=IDS, data=DATA)
    assert verdict.ok is False and says in verdict.message


def test_23_accepts():
    assert check("2.3", 0.5, quiet=True, ids=IDS, data=DATA)
