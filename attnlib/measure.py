"""Measuring a call: peak tensor memory (PyTorch's CPU allocations above the level before it) and interleaved timing.

``torch.profiler`` with ``profile_memory=True`` records every tensor allocation and free with its
size and time. Summing them in time order gives the bytes held over time; the maximum is the
peak. It counts tensor memory exactly (the returned tensors included), but not memory that a
library such as oneDNN or OpenMP allocates outside PyTorch's allocator, nor the process RSS.
Profiling slows the call down, so never time a profiled call.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable

from torch.profiler import ProfilerActivity, profile

try:  # the profiler's event tree; the public API only exposes per-op totals
    from torch._C._profiler import _EventType
except ImportError:  # pragma: no cover - very old or very new PyTorch
    _EventType = None


@contextlib.contextmanager
def quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ start/stop chatter) for the duration of the block."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_extra_mb(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Call ``fn()`` once; return (peak MB allocated by PyTorch above the level before the call, its output).

    Returns NaN for the MB when this PyTorch does not expose the profiler's event tree.
    """
    if _EventType is None:
        return float("nan"), fn()
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = []

    def walk(event):
        if event.tag == _EventType.Allocation:
            events.append((event.start_time_ns, event.extra_fields.alloc_size))  # size < 0 for a free
        for child in event.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    level = peak = 0
    for _, size in sorted(events):
        level += size
        peak = max(peak, level)
    return peak / 2**20, out


def interleaved_times(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Call every function once per round, rotating the order; return the seconds of each call.

    Call each function once before (a warm-up), so that first-call costs are not measured. On a
    shared machine, compare calls made close together: use ratios per round, not absolute times.
    """
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times
