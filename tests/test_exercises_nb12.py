"""Notebook 12's checkers: the right answer passes, typical mistakes are rejected with a sentence that names them."""
import pytest
import torch

from attnlib.exercises import check


def combine_right(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    return m, l1 * torch.exp(m1 - safe) + l2 * torch.exp(m2 - safe)


def combine_no_rescale(m1, l1, m2, l2):
    return torch.maximum(m1, m2), l1 + l2


def combine_nan(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def combine_min(m1, l1, m2, l2):
    m = torch.minimum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def test_12_1_accepts_the_rescaled_merge():
    assert check("12.1", combine_right, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (combine_no_rescale, "rescale l1 by exp(m1 - m)"),
    (combine_nan, "NaN"),
    (combine_min, "larger of the two maxima"),
    (42, "expected a function"),
])
def test_12_1_rejects_typical_mistakes(wrong, says):
    verdict = check("12.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_12_2_accepts_the_cache_size():
    assert check("12.2", 2 * 32 * 8192 * 8 * 128 * 2, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (32 * 8192 * 8 * 128 * 2, "keys *and* values"),
    (2 * 32 * 8192 * 32 * 128 * 2, "query heads"),
    (2 * 32 * 8192 * 8 * 128 * 16, "bits"),
    (1.0, "in bytes"),
    ("1 GiB", "expected a number"),
])
def test_12_2_rejects_typical_mistakes(wrong, says):
    verdict = check("12.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_12_3_accepts_the_reach_formula():
    assert check("12.3", lambda depth, window, n: min(n, depth * (window - 1) + 1), quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda depth, window, n: min(n, depth * window), "window - 1 new tokens"),
    (lambda depth, window, n: depth * (window - 1) + 1, "cap it at n"),
    (lambda depth, window, n: min(n, depth * (window - 1)), "itself counts"),
    (lambda depth, window, n: window, "should be"),
])
def test_12_3_rejects_typical_mistakes(wrong, says):
    verdict = check("12.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_placeholders_are_not_attempted():
    for exercise in ("12.1", "12.2", "12.3"):
        assert check(exercise, None, quiet=True).ok is None
