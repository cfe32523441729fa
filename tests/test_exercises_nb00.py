"""Notebook 00's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib import padding_mask
from attnlib.exercises import check

RIGHT_02 = {"output": (3, 10, 64), "weights": (3, 8, 10, 10), "d_k": 8, "parameters": 4 * (64 * 64 + 64)}


@pytest.mark.parametrize("wrong, says", [
    ({**RIGHT_02, "weights": (3, 10, 10)}, "heads axis"),
    ({**RIGHT_02, "parameters": 4 * 64 * 64}, "biases"),
    ({**RIGHT_02, "d_k": 64}, "d_model / num_heads"),
    ({"output": (3, 10, 64)}, "keys"),
])
def test_02_rejects(wrong, says):
    verdict = check("0.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_02_accepts():
    assert check("0.2", RIGHT_02, quiet=True)


KEEP = padding_mask([6, 3], max_len=6)


@pytest.mark.parametrize("wrong, says", [
    (~KEEP[:, None, None, :], "polarity"),
    (KEEP[:, None, :, None], "queries"),
    (padding_mask([6, 4], max_len=6)[:, None, None, :], "off by one"),
    (KEEP, "four axes"),
    (KEEP[:, None, None, :].long(), "dtype"),
])
def test_03_rejects(wrong, says):
    verdict = check("0.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_03_accepts_broadcast_and_full_masks():
    assert check("0.3", KEEP[:, None, None, :], quiet=True)
    assert check("0.3", KEEP[:, None, None, :].expand(2, 2, 6, 6).clone(), quiet=True)


def _in_place(m):
    m.logical_not_()
    return m


@pytest.mark.parametrize("wrong, says", [
    (lambda m: m, "unchanged"),
    (lambda m: ~m.T, "transposed"),
    (lambda m: (~m).float(), "bool"),
    (_in_place, "in place"),
    ("~mask", "function"),
])
def test_04_rejects(wrong, says):
    verdict = check("0.4", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_04_accepts():
    assert check("0.4", lambda m: ~m, quiet=True)
    assert check("0.4", lambda m: m.logical_not(), quiet=True)
