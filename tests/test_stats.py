"""Tests of attnlib/stats.py: mean and range over seeds, the printed form, and the "apart" / "within noise" rule."""
import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given

from attnlib.stats import Spread, above, apart, spread, verdict

finite = st.floats(-1e6, 1e6, allow_nan=False)


def test_spread_and_its_printed_form():
    s = spread([0.998, 0.993, 1.0])
    assert (s.low, s.high, s.n) == (0.993, 1.0, 3) and s.mean == pytest.approx(0.997)
    assert str(s) == "0.997 [0.993, 1.000]" and f"{s}" == str(s)
    assert f"{s:.4f}" == "0.9970 [0.9930, 1.0000]"
    assert f"{spread([1, 2, 4]):.1f}" == "2.3 [1.0, 4.0]"


def test_one_value_is_its_own_range():
    s = spread([0.5])
    assert s == Spread(0.5, 0.5, 0.5, 1) and str(s) == "0.500 [0.500, 0.500]"
    assert verdict([0.5], [0.5]) == "within noise" and verdict([0.5], [0.4]) == "apart"


def test_ranges_that_touch_or_tie_overlap():
    assert not above([0.9, 1.0], [0.8, 0.9]) and verdict([0.9, 1.0], [0.8, 0.9]) == "within noise"  # touching
    assert verdict([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) == "within noise"  # every seed tied
    assert above([0.91, 1.0], [0.8, 0.9]) and not above([0.8, 0.9], [0.91, 1.0])
    assert apart([0.8, 0.9], [0.91, 1.0]) and verdict([0.8, 0.9], [0.91, 1.0]) == "apart"  # either order
    assert verdict([0.1, 0.5, 0.9], [0.4, 0.45]) == "within noise"  # one range inside the other


def test_values_may_be_a_list_a_tuple_a_tensor_or_an_array():
    want = spread([0.25, 0.5, 1.0])
    for values in ((0.25, 0.5, 1.0), torch.tensor([0.25, 0.5, 1.0]), np.array([0.25, 0.5, 1.0])):
        assert spread(values) == want
    assert apart(torch.tensor([2.0, 3.0]), np.array([0.0, 1.0]))
    assert all(isinstance(x, float) for x in spread(torch.tensor([1, 2]))[:3])


def test_values_it_cannot_judge_are_refused():
    with pytest.raises(ValueError, match="values is empty; it needs one value per seed"):
        spread([])
    with pytest.raises(ValueError, match=r"values must be one value per seed \(1-D\), got shape \(2, 2\)"):
        spread([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"a must hold finite numbers, got \[1.0, nan\]"):
        apart([1.0, float("nan")], [0.0])
    with pytest.raises(ValueError, match="b must be a torch.Tensor or a NumPy array of numbers, got str"):
        above([1.0], "high")


@given(st.lists(finite, min_size=1, max_size=8), st.lists(finite, min_size=1, max_size=8))
def test_hypothesis_apart_is_symmetric_and_means_no_value_of_one_reaches_the_other(a, b):
    assert apart(a, b) == apart(b, a)
    overlap = any(x <= y for x in a for y in b) and any(y <= x for x in a for y in b)
    assert apart(a, b) == (not overlap)
    assert verdict(a, b) == ("apart" if apart(a, b) else "within noise")
    s = spread(a)
    assert s.low <= s.mean + 1e-9 * max(1.0, abs(s.mean)) and s.mean <= s.high + 1e-9 * max(1.0, abs(s.mean))


def test_a_spread_stands_for_its_range():
    """A Spread passed to above/apart/verdict is read as its range (low, high), never as the tuple (mean, low, high, n):
    the count n must not become a value."""
    hi, lo = spread([10.0, 11.0, 12.0]), spread([0.0, 1.0, 2.0])
    assert above(hi, lo) and apart(hi, lo) and apart(lo, hi) and verdict(hi, lo) == "apart"
    assert above(hi, [0.0, 2.0]) and not above([0.5, 0.6], spread([0.1, 0.55]))
    assert verdict(spread([0.1, 0.3]), spread([0.2, 0.4])) == "within noise"
