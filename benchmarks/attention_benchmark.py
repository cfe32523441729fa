"""How much do the readable attention and attnlib's fast path cost, next to PyTorch's fused kernel?

Run it with ``make benchmark`` (or ``python benchmarks/attention_benchmark.py``); it prints
three tables in a few minutes on a quiet 2-core CPU (one run on a heavily shared one took 12 minutes),
and saves a plot of table 3 outside the repository (the path is printed).

Table 1: attention alone, batch 8, 8 heads, d_head 64, fp32, at N = 256 ... 2048 tokens,
without a mask, and with a causal (bool) mask up to N = 1024. Three implementations get the same q, k, v
(B, h, N, d_head) and the same mask:

* ``teaching``: ``attnlib.scaled_dot_product_attention``, which stores the (N, N) scores
  and weights and returns the weights;
* ``attnlib fast``: ``attnlib.attention.fused_attention``, the code behind
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

Table 3 (notebook 12): causal attention at batch 1, 8 heads, d_head 64, N = 256 ... 2048, for the
teaching version, ``attnlib.tiled_attention`` (online softmax over 128 x 128 tiles, a Python loop) and
the fused kernel: time ratio to fused and peak extra memory. Beside them, a whole
``MultiHeadAttention(..., num_kv_heads=g)`` layer (d_model 512, 8 query heads) with g = 8, 2 and 1 key/value heads:
its time, its peak memory, and the size of the K and V it would cache for N tokens (2 * N * g * d_head
* 4 bytes). The tiled version's memory grows like N, the teaching version's like N^2; the tiled version
is slower than the fused kernel, because each tile is several separate PyTorch calls with their own
memory round trips, where the fused kernel keeps the tile in cache inside one call.

How time is measured. The machine may be shared and noisy, so every implementation is
warmed up once, then the implementations are run in *interleaved rounds* (one call of each
per round, in a rotating order), and we report the median time and the median over rounds
of the per-round ratio to the reference. Ratios of calls made seconds apart are far more
stable than absolute times. Timings use ``time.perf_counter`` around one call.

How memory is measured (``attnlib.measure.peak_extra_mb``, which notebook 12 uses too). "Peak
extra MB" is the largest amount of memory PyTorch's CPU allocator held *on top of what existed
before the call*, at any moment during the call (the returned tensors included). It comes from
``torch.profiler`` with ``profile_memory=True``: the profiler records every CPU tensor allocation and free with
its size and time; summing them in time order gives the allocated bytes over time, whose
maximum is the peak. This counts tensor memory exactly, but not memory that a library
(oneDNN, OpenMP) allocates outside PyTorch's allocator, nor the process RSS. It is
measured on the warm-up call, which is not timed, because profiling slows calls down.
"""
from __future__ import annotations

import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

import attnlib
from attnlib.measure import interleaved_times, peak_extra_mb
from attnlib.attention import fused_attention
from attnlib.multihead import MultiHeadAttention
from attnlib.tiled import tiled_attention

LENGTHS = (256, 512, 1024, 2048)
CAUSAL_MAX_N = 1024
BATCH, HEADS, D_HEAD = 8, 8, 64
MHA_N, MHA_D, MHA_HEADS, MHA_BATCH = 1024, 512, 8, 4
SCALE_LENGTHS = (256, 512, 1024, 2048)
SCALE_BATCH, SCALE_HEADS, BLOCK = 1, 8, 128
GQA_KV_HEADS = (8, 2, 1)
PLOT_DIR = Path(tempfile.gettempdir()) / "attnlib-benchmark"  # outside the repository


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


def scale_table() -> dict:
    """Table 3: the tiled (online-softmax) attention and grouped-query attention against N."""
    print(f"\nTable 3: attention at scale, causal, batch {SCALE_BATCH}, {SCALE_HEADS} heads, d_head {D_HEAD}, fp32; "
          f"tiled = attnlib.tiled_attention(block_size={BLOCK}).\n"
          f"GQA = attnlib MultiHeadAttention(d_model {SCALE_HEADS * D_HEAD}, {SCALE_HEADS} query heads, g key/value "
          "heads, need_weights=False), the whole layer; 'KV MB' = the K and V it would cache for N tokens.\n")
    header = (f"{'N':>5} | {'fused ms':>8} {'tiled/fused':>11} {'teaching/fused':>14} | "
              f"{'peak extra MB: teaching':>23} {'tiled':>6} {'fused':>6} | "
              + " ".join(f"{f'GQA g={g} ms':>11}" for g in GQA_KV_HEADS) + " | "
              + " ".join(f"{f'g={g} MB':>7} {'KV MB':>6}" for g in GQA_KV_HEADS))
    print(header)
    print("-" * len(header))
    g_ = torch.Generator().manual_seed(0)
    d_model = SCALE_HEADS * D_HEAD
    layers = {}
    for g in GQA_KV_HEADS:
        torch.manual_seed(0)
        layers[g] = MultiHeadAttention(d_model, SCALE_HEADS, num_kv_heads=g).eval()
    results = {"N": [], "teaching": [], "tiled": [], "fused": [], "t_teaching": [], "t_tiled": [], "t_fused": []}
    for n in SCALE_LENGTHS:
        q, k, v = (torch.randn(SCALE_BATCH, SCALE_HEADS, n, D_HEAD, generator=g_) for _ in range(3))
        x = torch.randn(SCALE_BATCH, n, d_model, generator=g_)
        mask = attnlib.causal_mask(n)
        fns = {
            "teaching": lambda: attnlib.scaled_dot_product_attention(q, k, v, mask)[0],
            "tiled": lambda: tiled_attention(q, k, v, causal=True, block_size=BLOCK),
            "fused": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        gqa_fns = {g: (lambda layer=layer: layer(x, x, x, mask=mask, need_weights=False)[0])
                   for g, layer in layers.items()}
        with torch.no_grad():
            memory, outputs = {}, {}
            for name, fn in {**fns, **gqa_fns}.items():  # one profiled call each: memory, warm-up, correctness
                memory[name], outputs[name] = peak_extra_mb(fn)
            assert torch.allclose(outputs["tiled"], outputs["fused"], atol=1e-4)
            assert torch.allclose(outputs["teaching"], outputs["fused"], atol=1e-4)
            del outputs
            rounds = 6 if n <= 1024 else 3
            times = interleaved_times(fns, rounds=rounds)
            gqa_times = interleaved_times(gqa_fns, rounds=rounds)
        kv_mb = {g: 2 * n * g * D_HEAD * 4 * SCALE_BATCH / 2**20 for g in GQA_KV_HEADS}  # K and V, fp32
        print(f"{n:>5} | {statistics.median(times['fused']) * 1e3:>8.1f} {ratio(times, 'tiled', 'fused'):>10.2f}x "
              f"{ratio(times, 'teaching', 'fused'):>13.2f}x | {memory['teaching']:>23,.1f} {memory['tiled']:>6,.1f} "
              f"{memory['fused']:>6,.1f} | "
              + " ".join(f"{statistics.median(gqa_times[g]) * 1e3:>11.1f}" for g in GQA_KV_HEADS) + " | "
              + " ".join(f"{memory[g]:>7,.1f} {kv_mb[g]:>6,.2f}" for g in GQA_KV_HEADS), flush=True)
        results["N"].append(n)
        for name in fns:
            results[name].append(memory[name])
            results[f"t_{name}"].append(statistics.median(times[name]))
    print("\nThe tiled version is a Python loop over (block x block) tiles: each tile is a separate PyTorch call that\n"
          "reads its blocks of q, k, v from memory and writes a small result back, so it pays call overhead and\n"
          "memory traffic on every tile. Its point is memory. The fused kernel runs the same kind of loop inside one call.")
    return results


def save_plot(results: dict) -> Path | None:
    """Peak memory and time against N on log-log axes, saved outside the repository; None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in ("teaching", "tiled", "fused"):
        axes[0].loglog(results["N"], results[name], marker="o", label=name)
        axes[1].loglog(results["N"], [t * 1e3 for t in results[f"t_{name}"]], marker="o", label=name)
    axes[0].set(xlabel="N (tokens)", ylabel="peak extra MB", title="memory, causal attention")
    axes[1].set(xlabel="N (tokens)", ylabel="median ms", title="time, causal attention")
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    PLOT_DIR.mkdir(parents=True, exist_ok=True)
    path = PLOT_DIR / "attention_scale.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    print(f"python {platform.python_version()}, torch {torch.__version__}, attnlib {attnlib.__version__}, "
          f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}\n")
    start = time.perf_counter()
    attention_table()
    multihead_table()
    path = save_plot(scale_table())
    print(f"\nplot of table 3 saved to {path}" if path else "\n(matplotlib missing: no plot)")
    print(f"\n(total {time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
