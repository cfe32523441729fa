"""Notebook 11's checkers: each accepts the right answer and rejects the mistakes learners make."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_mask():
    return torch.ones(3, 8, dtype=torch.bool).tril(5)


@pytest.mark.parametrize("wrong, says", [
    (torch.ones(3, 8, dtype=torch.bool).tril(), "diagonal is not shifted"),
    (torch.ones(3, 3, dtype=torch.bool).tril(), "covers only the new tokens"),
    (~torch.ones(3, 8, dtype=torch.bool).tril(5), "polarity"),
    (torch.ones(3, 8).tril(5), "dtype"),
    (torch.ones(3, 8, dtype=torch.bool).tril(6), "may see the future key 6"),
])
def test_11_1_rejects_typical_mistakes(wrong, says):
    verdict = check("11.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_1_accepts_the_right_mask():
    assert check("11.1", right_mask(), quiet=True)


def right_params(V, T, d, layers, d_ff):
    return V * d + T * d + layers * (4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d) + 2 * d


@pytest.mark.parametrize("wrong, says", [
    (lambda V, T, d, L, f: right_params(V, T, d, L, f) + V * d, "tied"),
    (lambda V, T, d, L, f: right_params(V, T, d, L, f) - T * d, "position embedding"),
    (lambda V, T, d, L, f: right_params(V, T, d, L, f) - 2 * d, "final LayerNorm"),
    (lambda V, T, d, L, f: right_params(V, T, d, L, f) - L * 4 * d, "your function says"),  # no biases in attention
    (12345, "expected a function"),
])
def test_11_2_rejects_typical_mistakes(wrong, says):
    verdict = check("11.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_2_accepts_the_formula():
    assert check("11.2", right_params, quiet=True)


def right_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


@pytest.mark.parametrize("wrong, says", [
    (lambda x, k: x.masked_fill(x < x.topk(k, dim=-1).values[:, -1:], 0.0), "use -inf"),
    (lambda x, k: x.masked_fill(x <= x.topk(k, dim=-1).values[:, -1:], float("-inf")), "must keep exactly"),
    (lambda x, k: x.masked_fill(x > x.topk(k, dim=-1).values[:, -1:], float("-inf")), "must keep exactly"),
    (lambda x, k: right_top_k(x, k).softmax(-1), "unchanged"),
    (lambda x, k: x.topk(k, dim=-1).values, "expected a tensor of shape (4, 10)"),
])
def test_11_3_rejects_typical_mistakes(wrong, says):
    verdict = check("11.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_3_accepts_the_right_filter():
    assert check("11.3", right_top_k, quiet=True)
