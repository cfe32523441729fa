"""Comparing runs over seeds: the mean and range of a result, and whether two ranges are apart.

The series reports every comparison as the mean and the range (lowest, highest) over at least
three seeds, printed ``0.998 [0.993, 1.000]``, and calls two results **apart** only when their
ranges do not overlap: every seed of one is above every seed of the other. Anything else is
**within noise**, never a ranking. Ranges that touch (one's lowest equals the other's highest)
overlap. Introduced in notebook 01 (section 8, the hidden-size sweep) and used by every
notebook that compares seeds.

Values are any sequence of numbers: a list, a tuple, a 1-D tensor or array.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import to_numpy

__all__ = ["Spread", "above", "apart", "spread", "verdict"]


class Spread(NamedTuple):
    """The mean, lowest and highest of one result over seeds, and how many seeds there were.

    ``str(s)`` and ``f"{s}"`` read ``0.998 [0.993, 1.000]``; a format spec applies to all three
    numbers: ``f"{s:.4f}"`` reads ``0.9980 [0.9930, 1.0000]``.
    """

    mean: float
    low: float
    high: float
    n: int

    def __format__(self, spec: str) -> str:
        spec = spec or ".3f"
        return f"{self.mean:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"

    def __str__(self) -> str:
        return format(self)


def _values(values: object, name: str) -> list[float]:
    """The numbers of ``values`` as a list of floats; a ValueError unless 1-D, non-empty and finite.

    A :class:`Spread` stands for its range: ``[low, high]`` (its mean lies between them, and ``n`` is a count, not a
    value), so ``above(spread(a), spread(b))`` is ``above(a, b)``."""
    if isinstance(values, Spread):
        values = [values.low, values.high]
    array = to_numpy(values, name)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one value per seed (1-D), got shape {tuple(array.shape)}")
    if array.size == 0:
        raise ValueError(f"{name} is empty; it needs one value per seed")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} must hold finite numbers, got {array.tolist()}")
    return array.tolist()


def spread(values: object) -> Spread:
    """Mean, lowest and highest of ``values`` (one per seed): a :class:`Spread`, which prints ``0.998 [0.993, 1.000]``."""
    v = _values(values, "values")
    return Spread(sum(v) / len(v), min(v), max(v), len(v))


def above(a: object, b: object) -> bool:
    """True when every value of ``a`` is above every value of ``b`` (``a``'s lowest > ``b``'s highest)."""
    return min(_values(a, "a")) > max(_values(b, "b"))


def apart(a: object, b: object) -> bool:
    """True when the ranges of ``a`` and ``b`` do not overlap (either is above the other); touching ranges overlap."""
    return above(a, b) or above(b, a)


def verdict(a: object, b: object) -> str:
    """``"apart"`` when the ranges of ``a`` and ``b`` do not overlap, else ``"within noise"``."""
    return "apart" if apart(a, b) else "within noise"
