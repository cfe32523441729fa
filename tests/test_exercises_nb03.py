"""Notebook 03's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import check


def right_entropy(p):
    return float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean())


@pytest.mark.parametrize("wrong, says", [
    (lambda p: float(-(p * p.clamp_min(1e-12).log2()).sum(-1).mean()), "base 2"),
    (lambda p: float((p * p.clamp_min(1e-12).log()).sum(-1).mean()), "sign"),
    (lambda p: float(-(p * p.log()).sum(-1).mean()), "NaN"),
    (lambda p: float(-(p * p.clamp_min(1e-12).log()).sum()), "summed over the rows"),
])
def test_31_rejects(wrong, says):
    verdict = check("3.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


@pytest.mark.parametrize("wrong", [
    lambda p: -(p * p.clamp_min(1e-12).log()).sum(-1),          # one entropy per row, not their mean
    lambda p: -(p * p.clamp_min(1e-12).log()).sum(-1).mean(-1),  # the mean over the last batch axis only
])
def test_31_rejects_one_value_per_row_with_a_sentence(wrong):
    verdict = check("3.1", wrong, quiet=True)
    assert verdict.ok is False and "return one number" in verdict.message
    assert "raised" not in verdict.message


def test_31_accepts_a_one_element_tensor():
    assert check("3.1", lambda p: -(p * p.clamp_min(1e-12).log()).sum(-1).mean(), quiet=True)


def test_31_accepts():
    assert check("3.1", right_entropy, quiet=True)


def test_31_accepts_a_small_epsilon_in_the_log():
    """log(p + 1e-4) is off by 8e-4 on a uniform row over 8 keys: inside the tolerance."""
    assert check("3.1", lambda p: float(-(p * (p + 1e-4).log()).sum(-1).mean()), quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda p: float(-(p * (p + 1e-2).log()).sum(-1).mean()), "epsilon"),                  # too large an epsilon
    (lambda p: float(-(p * p.clamp_min(1e-12).log()).sum(-1).mean()) / 2, "not ln 8"),      # some other slip
    (lambda p: right_entropy(p.softmax(-1)), "[0.5, 0.5, 0, 0]"),                           # softmax of weights
    (lambda p: right_entropy((p + 0.01) / (p + 0.01).sum(-1, keepdim=True)), "[0.5, 0.5, 0, 0]"),  # smoothed p
])
def test_31_rejects_without_giving_the_values(wrong, says):
    verdict = check("3.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message
    for expected in ("2.079", "0.3466", "0.347", "0.34657"):   # ln 8 and the padded rows' mean entropy
        assert expected not in verdict.message


def right_32(luong):
    from attnlib import AdditiveAttention
    dq = luong.query_dim
    add = AdditiveAttention(dq, luong.key_dim, attn_dim=luong.W.out_features)
    with torch.no_grad():
        add.W_s.weight.copy_(luong.W.weight[:, :dq])
        add.W_h.weight.copy_(luong.W.weight[:, dq:])
        add.W_h.bias.zero_()
        add.v.weight.copy_(luong.v.weight)
    return add


def keep_bias(luong):
    add = right_32(luong)
    with torch.no_grad():
        add.W_h.bias.normal_()
    return add


def swapped(luong):
    add = right_32(luong)
    dq = luong.query_dim
    with torch.no_grad():
        add.W_s.weight.copy_(luong.W.weight[:, dq:])
        add.W_h.weight.copy_(luong.W.weight[:, :dq])
    return add


def no_v(luong):
    from attnlib import AdditiveAttention
    add = right_32(luong)
    fresh = AdditiveAttention(luong.query_dim, luong.key_dim, attn_dim=luong.W.out_features)
    with torch.no_grad():
        add.v.weight.copy_(fresh.v.weight)
    return add


def in_place(luong):
    add = right_32(luong)
    with torch.no_grad():
        luong.W.weight.zero_()
    return add


@pytest.mark.parametrize("wrong, says", [
    (keep_bias, "bias"),
    (swapped, "swapped"),
    (no_v, "copy v"),
    (in_place, "changed the Luong module"),
    (lambda luong: luong, "AdditiveAttention"),
    (lambda luong: None, "AdditiveAttention"),
])
def test_32_rejects(wrong, says):
    verdict = check("3.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_32_accepts():
    assert check("3.2", right_32, quiet=True)


def test_32_accepts_bias_none_or_assignment():
    """A module built another way (parameters assigned, bias replaced by zeros) scores the same: accepted."""
    from torch import nn

    def assigned(luong):
        add = right_32(luong)
        dq = luong.query_dim
        add.W_s.weight = nn.Parameter(luong.W.weight[:, :dq].detach().clone())
        add.W_h.bias = nn.Parameter(torch.zeros(luong.W.out_features))
        return add
    assert check("3.2", assigned, quiet=True)


def right_top_k(w, k):
    top = w.topk(k, dim=-1)
    kept = torch.zeros_like(w).scatter(-1, top.indices, top.values)
    return kept / kept.sum(-1, keepdim=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda w, k: torch.zeros_like(w).scatter(-1, w.topk(k, -1).indices, w.topk(k, -1).values), "sum to 1"),
    (lambda w, k: right_top_k(-w, k).abs(), "wrong entries"),
    (lambda w, k: right_top_k(w.T, k).T, "wrong entries"),
    (lambda w, k: w.masked_fill_(w < w.topk(k, -1).values[..., -1:], 0) / w.sum(-1, keepdim=True), "in place"),
])
def test_33_rejects(wrong, says):
    verdict = check("3.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_33_rejects_wrong_values_without_giving_them():
    """Right entries, wrong values (a softmax over the kept weights): the message names the fix, not the rows."""
    def softmax_kept(w, k):
        top = w.topk(k, dim=-1)
        return torch.zeros_like(w).scatter(-1, top.indices, top.values.softmax(-1))
    verdict = check("3.3", softmax_kept, quiet=True)
    assert verdict.ok is False and "values are off" in verdict.message
    assert "0.625" not in verdict.message and "0.75" not in verdict.message


def test_33_accepts():
    assert check("3.3", right_top_k, quiet=True)
