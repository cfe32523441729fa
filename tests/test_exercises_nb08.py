"""Checkers of notebook 08's guided tasks: typical wrong choices rejected with their rank, the right one accepted."""
from __future__ import annotations

import types

import torch

from attnlib.exercises import check

# (layers, heads): layer 0 head 2 depends least on the digits, layer 1 head 1 most
SCORES = torch.tensor([[0.20, 0.15, 0.05, 0.30], [0.60, 0.90, 0.40, 0.55]])


def verdict(answer):
    return check("8.1", answer, quiet=True, content_dependence=SCORES)


def test_right_head_accepted_as_a_pair_or_an_explorer():
    assert verdict((0, 2))
    assert verdict(types.SimpleNamespace(layer=0, head=2))  # anything with .layer and .head, e.g. the explorer
    assert "ranks 1 of 8" in verdict((0, 2)).message


def test_the_opposite_head_is_named_as_such():
    v = verdict((1, 1))
    assert v.ok is False and "ranks 8 of 8" in v.message and "MOST" in v.message


def test_a_near_miss_reports_its_rank():
    v = verdict((0, 1))  # second lowest
    assert v.ok is False and "ranks 2 of 8" in v.message and "0.050" in v.message


def test_bad_shapes_of_answer_are_feedback_not_a_crash():
    for bad, says in [((2, 0), "layer must be in [0, 1]"), ((0,), "expected (layer, head)"), ("L0H2", "expected (layer, head)"),
                      ((0.0, 2.0), "expected (layer, head)")]:
        v = verdict(bad)
        assert v.ok is False and says in v.message, (bad, v.message)
