"""How much do the readable attention and attnlib's fast path cost, next to PyTorch's fused kernel?

Run it with ``make benchmark`` (or ``python benchmarks/attention_benchmark.py``); it prints
two tables in under a minute on a quiet 2-core CPU (about two minutes on a busy one).

Table 1: attention alone, batch 8, 8 heads, d_head 64, fp32, at N = 256 ... 2048 tokens,
without a mask, and with a causal (bool) mask up to N = 1024. Three implementations get the same q, k, v
(B, h, N, d_head) and the same mask:

* ``teaching``: ``attnlib.scaled_dot_product_attention``, which stores the (N, N) scores
  and weights and returns the weights;
* ``attnlib fast``: ``attnlib.multihead.fused_attention``, the code behind
  ``MultiHeadAttention(need_weights=False)``: PyTorch's fused kernel plus attnlib's mask
  convention (rows with no allowed key give zeros). Without a mask it *is* the fused call;
* ``fused``: ``torch.nn.functional.scaled_dot_product_attention`` called directly.

Table 2: a whole multi-head layer, ``attnlib.MultiHeadAttention(need_weights=False)``
against ``nn.MultiheadAttention(need_weights=False)`` holding the same weights (eval
mode, batch_first, self-attention x, x, x; N=1024, d_model 512, 8 heads, batch 4), once
under ``torch.no_grad()`` (inference: PyTorch takes its native "fast path") and once with
autograd on (PyTorch's ``F.multi_head_attention_forward``).

On the 2-core machine this was written on, attnlib's layer was not slower. With autograd
on, both layers call the same fused kernel and took about the same time (PyTorch computes
Q, K and V with one packed matmul; doing the same in attnlib made no measurable
difference, so attnlib keeps its three readable projections). Under ``no_grad`` PyTorch's
native path was slower and held about 150 MB instead of 40 MB, which is the size of the
(B, h, N, N) score matrix: it seems to store the scores that the fused kernel avoids.

How time is measured. The machine may be shared and noisy, so every implementation is
warmed up once, then the implementations are run in *interleaved rounds* (one call of each
per round, in a rotating order), and we report the median time and the median over rounds
of the per-round ratio to the reference. Ratios of calls made seconds apart are far more
stable than absolute times. Timings use ``time.perf_counter`` around one call.

How memory is measured. "Peak extra MB" is the largest amount of memory PyTorch's CPU
allocator held *on top of what existed before the call*, at any moment during the call
(the returned tensors included). It comes from ``torch.profiler`` with
``profile_memory=True``: the profiler records every CPU tensor allocation and free with
its size and time; summing them in time order gives the allocated bytes over time, whose
maximum is the peak. This counts tensor memory exactly, but not memory that a library
(oneDNN, OpenMP) allocates outside PyTorch's allocator, nor the process RSS. It is
measured on the warm-up call, which is not timed, because profiling slows calls down.
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

import attnlib
from attnlib.multihead import fused_attention

try:  # the profiler's event tree; the public API only exposes per-op totals
    from torch._C._profiler import _EventType
except ImportError:  # pragma: no cover - very old or very new PyTorch
    _EventType = None

LENGTHS = (256, 512, 1024, 2048)
CAUSAL_MAX_N = 1024
BATCH, HEADS, D_HEAD = 8, 8, 64
MHA_N, MHA_D, MHA_HEADS, MHA_BATCH = 1024, 512, 8, 4


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


def peak_extra_mb(fn):
    """Call ``fn()`` once; return (peak MB allocated by PyTorch above the level before the call, its output)."""
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


def interleaved_times(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Call every function once per round, rotating the order; return the seconds of each call.

    The caller has called each function once already (a warm-up), so first-call costs are not measured.
    """
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def ratio(times: dict, name: str, reference: str) -> float:
    return statistics.median(a / b for a, b in zip(times[name], times[reference]))


def attention_table() -> None:
    print(f"Table 1: attention alone, batch {BATCH}, {HEADS} heads, d_head {D_HEAD}, fp32 "
          "(time ratio = median over interleaved rounds of time / fused time)\n")
    header = (f"{'N':>5} {'mask':>6} | {'fused ms':>9} | {'teaching/fused':>14} {'fast/fused':>10} | "
              f"{'peak extra MB: teaching':>23} {'fast':>7} {'fused':>7}")
    print(header)
    print("-" * len(header))
    g = torch.Generator().manual_seed(0)
    for n in LENGTHS:
        q, k, v = (torch.randn(BATCH, HEADS, n, D_HEAD, generator=g) for _ in range(3))
        for mask in (None, attnlib.causal_mask(n)):
            fns = {
                "teaching": lambda: attnlib.scaled_dot_product_attention(q, k, v, mask),
                "fast": lambda: fused_attention(q, k, v, mask),
                "fused": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            }
            if mask is not None and n > CAUSAL_MAX_N:
                continue
            with torch.no_grad():
                memory, outputs = {}, {}
                for name, fn in fns.items():  # one profiled call each: memory, warm-up and a correctness check
                    memory[name], outputs[name] = peak_extra_mb(fn)
                assert torch.allclose(outputs["teaching"][0], outputs["fused"], atol=1e-4)
                assert torch.allclose(outputs["fast"], outputs["fused"], atol=1e-4)
                del outputs
                times = interleaved_times(fns, rounds=6 if n <= 1024 else 3)  # multiples of 3: each order equally often
            print(f"{n:>5} {'causal' if mask is not None else 'none':>6} | "
                  f"{statistics.median(times['fused']) * 1e3:>9.1f} | "
                  f"{ratio(times, 'teaching', 'fused'):>13.2f}x {ratio(times, 'fast', 'fused'):>9.2f}x | "
                  f"{memory['teaching']:>23,.0f} {memory['fast']:>7,.0f} {memory['fused']:>7,.0f}", flush=True)
        del q, k, v
    print(f"\nWithout a mask 'fast' makes the very same call as 'fused', so its ratio shows the timing noise.\n"
          f"Causal rows stop at N={CAUSAL_MAX_N}: one teaching call with a mask at N=2048 needs ~3 GB and many seconds.")


def multihead_table() -> None:
    print(f"\nTable 2: attnlib.MultiHeadAttention vs nn.MultiheadAttention, need_weights=False, same weights, eval,\n"
          f"self-attention, N={MHA_N}, d_model {MHA_D}, {MHA_HEADS} heads, batch {MHA_BATCH} "
          "(ratio = median over interleaved rounds of attnlib time / nn time; <= 1.00 means attnlib is not slower)\n")
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(MHA_D, MHA_HEADS, batch_first=True).eval()
    ours = attnlib.MultiHeadAttention(MHA_D, MHA_HEADS).copy_from_torch(theirs).eval()
    x = torch.randn(MHA_BATCH, MHA_N, MHA_D)
    fns = {
        "attnlib": lambda: ours(x, x, x, need_weights=False)[0],
        "nn": lambda: theirs(x, x, x, need_weights=False)[0],
    }
    header = (f"{'mode':>22} | {'attnlib ms':>10} {'nn ms':>8} | {'attnlib/nn':>10} {'(per-round range)':>18} | "
              f"{'peak extra MB: attnlib':>22} {'nn':>5}")
    print(header)
    print("-" * len(header))
    for mode, grad in (("inference (no_grad)", False), ("autograd on", True)):
        with torch.set_grad_enabled(grad):
            memory, outputs = {}, {}
            for name, fn in fns.items():  # one profiled call each: memory, warm-up and a correctness check
                memory[name], outputs[name] = peak_extra_mb(fn)
            assert torch.allclose(outputs["attnlib"], outputs["nn"], atol=1e-5)
            del outputs
            times = interleaved_times(fns, rounds=10)
            rounds = [a / b for a, b in zip(times["attnlib"], times["nn"])]
        print(f"{mode:>22} | {statistics.median(times['attnlib']) * 1e3:>10.1f} "
              f"{statistics.median(times['nn']) * 1e3:>8.1f} | {ratio(times, 'attnlib', 'nn'):>9.2f}x "
              f"{f'({min(rounds):.2f} - {max(rounds):.2f})':>18} | {memory['attnlib']:>22,.0f} {memory['nn']:>5,.0f}",
              flush=True)


def main() -> None:
    print(f"python {platform.python_version()}, torch {torch.__version__}, attnlib {attnlib.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}\n")
    start = time.perf_counter()
    attention_table()
    multihead_table()
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
