"""Checkers for notebook 07's exercises (parameter count, an exhaustive family of inputs, the warm-up schedule)."""
from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from . import checker, require
from .nb00 import callable_problem, tensor_problem


#: A block too large to build here (about 3.2 billion parameters, 13 GB of float32): only a formula can count it.
TOO_LARGE_TO_BUILD = (16384, 16, 65536)


def _block_params(d: int, h: int, d_ff: int) -> int:
    """The parameters of ``attnlib.TransformerBlock(d, h, d_ff)``; the test file checks it against ``numel``."""
    attention = 4 * (d * d + d)                 # W_q, W_k, W_v, W_o with their biases, shared by the heads
    feed_forward = (d * d_ff + d_ff) + (d_ff * d + d)
    layer_norms = 2 * 2 * d                     # gamma and beta of two LayerNorms
    return attention + feed_forward + layer_norms


class _BuildsTensors(Exception):
    """Raised when the answer creates a tensor while it should only compute with numbers."""


class _NoTensors(TorchFunctionMode):
    """Inside this context any torch function (``torch.empty`` building a layer, too) raises _BuildsTensors,
    before any memory is taken."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise _BuildsTensors(getattr(func, "__name__", str(func)))


def _wrong_part(answer, d: int, h: int, d_ff: int) -> str:
    """Which part of the count is off at (d, h, d_ff), without giving the count itself."""
    got = answer(d, h, d_ff)
    right = _block_params(d, h, d_ff)
    if got == right - 4 * d:
        return ("short by 4·d_model: count both the biases of the four attention projections "
                "and the gamma and beta of the two LayerNorms")
    if got == right - 8 * d:
        return "short by 8·d_model: the attention biases and the two LayerNorms (gamma, beta) are missing"
    if got == right - (d_ff + d):
        return "the feed-forward layers have biases (d_ff and d_model)"
    if answer(d, 1, d_ff) != got:
        return "the heads share the four d_model x d_model projections; the count does not change with num_heads"
    if answer(d, h, d_ff + 1) - got != 2 * d + 1:
        return ("the part that grows with d_ff is off: count the weights and the biases of both feed-forward "
                "layers")
    return ("the part that depends on d_model alone is off: count the four attention projections (a weight "
            "and a bias each) and the two LayerNorms (gamma and beta each)")


@checker("7.1")
def block_params_fn(answer) -> tuple[bool, str]:
    """``answer(d_model, num_heads, d_ff) -> int``: the parameters of attnlib.TransformerBlock, as a formula."""
    from attnlib.transformer import TransformerBlock

    require(callable_problem(answer, "a function block_params(d_model, num_heads, d_ff)"))
    for d, h, d_ff in ((64, 4, 128), (48, 6, 200), (768, 12, 3072)):
        counted = sum(p.numel() for p in TransformerBlock(d, h, d_ff).parameters())
        if answer(d, h, d_ff) != counted:
            return False, f"d_model={d}, heads={h}, d_ff={d_ff}: your count is off; " + _wrong_part(answer, d, h, d_ff)
    d, h, d_ff = TOO_LARGE_TO_BUILD
    try:
        with _NoTensors():
            got = answer(d, h, d_ff)
    except _BuildsTensors:
        return False, (f"your function builds tensors (a block?); count from the sizes alone: the check also asks "
                       f"for d_model={d}, d_ff={d_ff}, a block too large to build here")
    if got != _block_params(d, h, d_ff):
        return False, f"d_model={d}, heads={h}, d_ff={d_ff}: your count is off; " + _wrong_part(answer, d, h, d_ff)
    return True, "4(d²+d) + 2·d·d_ff + d_ff + d + 4d, the same for any number of heads"


@checker("7.2")
def one_odd_digit_family(answer, length: int = 12) -> tuple[bool, str]:
    """All inputs of ``length`` digits made of length-1 copies of one digit and a single different digit."""
    n = 10 * 9 * length
    require(tensor_problem(answer, what="the inputs"))
    if answer.dim() != 2 or answer.shape[1] != length:
        return False, f"expected one input per row, shape (N, {length}), got {tuple(answer.shape)}"
    if answer.shape[0] == 10 * 10 * length:
        return False, "the single digit must differ from the others (a != b); rows of one repeated digit are not in the family"
    if answer.shape[0] != n:
        return False, f"expected 10 · 9 · {length} = {n} inputs (repeated digit, different digit, its position), got {answer.shape[0]}"
    if answer.dtype not in (torch.int64, torch.int32):
        return False, f"expected integer digits (torch.long), got {answer.dtype}"
    counts = torch.nn.functional.one_hot(answer.long().clamp(0, 9), 10).sum(1)  # (N, 10)
    if answer.min() < 0 or answer.max() > 9 or not ((counts == length - 1).sum(1) == 1).all():
        return False, f"every row must hold {length - 1} copies of one digit and one different digit"
    if len({tuple(r) for r in answer.tolist()}) != n:
        return False, "some inputs appear twice (and so others are missing): loop over the position of the odd digit too"
    return True, f"all {n} inputs, each once"


#: The runs the 7.3 check compares: (steps, peak, warmup).
SCHEDULE_RUNS = ((60, 2e-2, 20), (100, 1e-3, 0), (50, 0.5, 7))


def _rate_used(step: int, steps: int, peak: float, warmup: int) -> float:
    """The learning rate ``attnlib.train_steps`` (schedule "cosine") uses at step ``step`` (0 = the first step).

    tests/test_exercises_nb07.py checks this against the optimiser of ``train_steps`` itself."""
    ramp = min(1.0, (step + 1) / warmup) if warmup else 1.0
    return peak * ramp * 0.5 * (1 + math.cos(math.pi * step / steps))


def _schedule_mistake(answer, steps: int, peak: float, warmup: int) -> str | None:
    """Name the usual mistake that ``answer`` matches on this run, or None."""
    def same(rule) -> bool:
        return all(math.isclose(float(answer(s, steps, peak, warmup)), rule(s), rel_tol=1e-6, abs_tol=1e-12)
                   for s in range(steps))

    cosine = lambda s: 0.5 * (1 + math.cos(math.pi * s / steps))  # noqa: E731
    ramp = lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0  # noqa: E731
    if same(lambda s: _rate_used(s, steps, 1.0, warmup)):
        return "these are shares of the peak; multiply by peak to get the learning rate"
    if same(lambda s: _rate_used(s + 1, steps, peak, warmup)):
        return ("off by one step: yours is the rate of the next step (what the history records after each step); "
                "step 0 is the first step")
    if warmup and same(lambda s: peak * min(1.0, s / warmup) * cosine(s)):
        return "with your ramp the first step has a learning rate of 0, so it changes nothing"
    if warmup and same(lambda s: peak * cosine(s)):
        return "the warm-up is missing: your rates do not change with warmup"
    if warmup and same(lambda s: peak * ramp(s) if s < warmup else
                       peak * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))):
        return ("a warm-up followed by a cosine over the remaining steps is a common schedule, but not this one: "
                "compare your rates with history[\"lr\"] after step warmup")
    return None


@checker("7.3")
def warmup_schedule(answer) -> tuple[bool, str]:
    """``answer(step, steps, peak, warmup) -> float``: the learning rate train_steps uses at ``step`` (0 = first)."""
    require(callable_problem(answer, "a function lr_at(step, steps, peak, warmup)"))
    for steps, peak, warmup in SCHEDULE_RUNS:
        try:
            got = [float(answer(s, steps, peak, warmup)) for s in range(steps)]
        except ZeroDivisionError:
            return False, f"lr_at(..., warmup={warmup}) divides by zero: warmup=0 means no warm-up at all"
        except (TypeError, ValueError) as err:
            return False, f"lr_at(step, steps, peak, warmup) should return a number; it raised {type(err).__name__}: {err}"
        wrong = [s for s in range(steps)
                 if not math.isclose(got[s], _rate_used(s, steps, peak, warmup), rel_tol=1e-6, abs_tol=1e-12)]
        if not wrong:
            continue
        mistake = _schedule_mistake(answer, steps, peak, warmup)
        if mistake:
            return False, mistake
        return False, (f"with steps={steps}, peak={peak}, warmup={warmup}, step {wrong[0]} gets {got[wrong[0]]:.4g}, "
                       f"which is not the rate the optimiser uses there ({len(wrong)} of {steps} steps differ)")
    return True, ("the rate of every step of three runs, with and without warm-up: the ramp scales a cosine that "
                  "runs over all the steps")
