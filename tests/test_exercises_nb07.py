"""Notebook 07's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import math

import pytest
import torch

import attnlib

from attnlib.exercises import check


def right_params(d, h, d_ff):
    return 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * 2 * d


@pytest.mark.parametrize("wrong, says", [
    (lambda d, h, f: right_params(d, h, f) - 4 * d, "short by 4·d_model"),
    (lambda d, h, f: right_params(d, h, f) - 8 * d, "short by 8·d_model"),
    (lambda d, h, f: right_params(d, h, f) + (h - 1) * 4 * (d * d + d), "share"),
    (lambda d, h, f: right_params(d, h, f) + h, "does not change with num_heads"),
    (lambda d, h, f: right_params(d, h, f) - f - d, "feed-forward layers have biases"),
    (lambda d, h, f: right_params(d, h, f) - f, "grows with d_ff"),
    (lambda d, h, f: right_params(d, h, f) + d * d, "d_model alone"),
])
def test_71_rejects(wrong, says):
    verdict = check("7.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message
    for size in ((64, 4, 128), (16384, 16, 65536)):        # the message never gives the count away
        assert f"{right_params(*size):,}" not in verdict.message and str(right_params(*size)) not in verdict.message


def test_71_rejects_counting_by_building():
    """Building the block and summing numel is not a formula: the check asks for a block too large to build, and
    stops the answer at its first tensor (no memory is taken)."""
    def by_numel(d, h, f):
        return sum(p.numel() for p in attnlib.TransformerBlock(d, h, f).parameters())

    verdict = check("7.1", by_numel, quiet=True)
    assert verdict.ok is False and "too large to build" in verdict.message, verdict.message


def test_71_rejects_a_table_of_the_small_sizes():
    table = {size: right_params(*size) for size in ((64, 4, 128), (48, 6, 200), (768, 12, 3072))}
    verdict = check("7.1", lambda d, h, f: table.get((d, h, f), 0), quiet=True)
    assert verdict.ok is False and "d_model=16384" in verdict.message, verdict.message


def test_71_formula_is_numel():
    from attnlib.exercises.nb07 import _block_params

    for size in ((64, 4, 128), (48, 6, 200), (32, 1, 7), (768, 12, 3072)):
        assert _block_params(*size) == sum(p.numel() for p in attnlib.TransformerBlock(*size).parameters())


def test_71_accepts():
    assert check("7.1", right_params, quiet=True)


def family(length=12, same_allowed=False, positions=None):
    rows = [[a] * p + [b] + [a] * (length - 1 - p) for a in range(10) for b in range(10) if same_allowed or a != b
            for p in (range(length) if positions is None else positions)]
    return torch.tensor(rows)


@pytest.mark.parametrize("wrong, says", [
    (family(same_allowed=True), "a != b"),
    (family(positions=range(11)), "expected 10 · 9 · 12"),
    (torch.cat([family()[:-1], family()[:1]]), "twice"),
    (family().float(), "integer"),
    (family().T, "one input per row"),
])
def test_72_rejects(wrong, says):
    verdict = check("7.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_72_accepts():
    assert check("7.2", family(), quiet=True)
    assert check("7.2", family()[torch.randperm(1080)], quiet=True)  # any order


def right_lr(s, steps, peak, warmup):
    ramp = min(1.0, (s + 1) / warmup) if warmup else 1.0
    return peak * ramp * 0.5 * (1 + math.cos(math.pi * s / steps))


def test_73_reference_is_the_rate_train_steps_uses():
    """The checker's rates against the optimiser of attnlib.train_steps: the rate used at step s is the history's
    lr after step s - 1 (and the peak times the first factor before step 0)."""
    from attnlib.exercises.nb07 import _rate_used

    def batch(n, generator):
        return torch.randint(0, 3, (n, 4), generator=generator), torch.randint(0, 3, (n, 4), generator=generator)

    for steps, warmup in ((12, 5), (9, 0)):
        torch.manual_seed(0)
        history = attnlib.train_steps(torch.nn.Embedding(3, 3), batch, steps=steps, lr=0.1, batch_size=2,
                                      warmup=warmup, progress=False)
        for s in range(1, steps):
            assert math.isclose(history["lr"][s - 1], _rate_used(s, steps, 0.1, warmup), rel_tol=1e-9)


def _piecewise(s, steps, peak, warmup):
    if warmup and s < warmup:
        return peak * (s + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))


@pytest.mark.parametrize("wrong, says", [
    (lambda s, n, p, w: right_lr(s, n, 1.0, w), "multiply by peak"),
    (lambda s, n, p, w: right_lr(s + 1, n, p, w), "off by one"),
    (lambda s, n, p, w: p * (min(1.0, s / w) if w else 1.0) * 0.5 * (1 + math.cos(math.pi * s / n)), "rate of 0"),
    (lambda s, n, p, w: p * 0.5 * (1 + math.cos(math.pi * s / n)), "warm-up is missing"),
    (_piecewise, "remaining steps"),
    (lambda s, n, p, w: p * min(1.0, (s + 1) / w) * 0.5 * (1 + math.cos(math.pi * s / n)), "divides by zero"),
    (lambda s, n, p, w: p * 0.5 * (1 + math.cos(math.pi * (s + 1) / n)) * min(1.0, (s + 1) / w) if w else p, "not the rate"),
    (lambda s, n, p, w: "fast", "should return a number"),
    (0.02, "expected a function"),
])
def test_73_rejects(wrong, says):
    verdict = check("7.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_73_accepts():
    assert check("7.3", right_lr, quiet=True)
    assert check("7.3", lambda s, n, p, w: torch.tensor(right_lr(s, n, p, w)), quiet=True)   # a 0-d tensor is fine
