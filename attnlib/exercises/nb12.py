"""Checkers for notebook 12's exercises (merging two halves of the keys, pooling heads into GQA, a sliding window that skips tiles)."""
from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from . import checker, require
from .nb00 import callable_problem


def _half_stats(s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, l, acc) of one block of keys: the running maximum, sum and unnormalised weighted sum of values."""
    m = s.amax(dim=-1, keepdim=True)
    safe = torch.where(m == float("-inf"), 0.0, m)
    p = torch.exp(s - safe)  # masked scores (-inf) give 0
    return m, p.sum(dim=-1, keepdim=True), p @ v


@checker("12.1")
def merge_halves(answer) -> tuple[bool, str]:
    """A function ``merge(m1, l1, acc1, m2, l2, acc2) -> (rows, d_v)``: the attention output over all keys from the
    (m, l, acc) of two halves of the keys; a row with no allowed key at all gives zeros, as in attnlib."""
    require(callable_problem(answer, "a function merge(m1, l1, acc1, m2, l2, acc2)"))
    g = torch.Generator().manual_seed(12)
    s = torch.randn(9, 12, generator=g) * 3
    s[:7, 6:] += torch.linspace(-12, 12, 7)[:, None]  # some rows: the second half's maximum is larger, some smaller
    s[7, 6:] += 100  # both halves allowed, the second half's maximum about 100 higher: exp(+100) overflows float32
    s[8, 6:] -= 100  # ... about 100 lower
    v = torch.randn(12, 5, generator=g)
    s[4, :6] = float("-inf")  # a row whose first half has no allowed key
    s[5, 6:] = float("-inf")  # ... whose second half has none
    s[6] = float("-inf")  # a row with no allowed key at all
    out = answer(*_half_stats(s[:, :6], v[:6]), *_half_stats(s[:, 6:], v[6:]))
    if not isinstance(out, torch.Tensor) or out.shape != (9, 5):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return False, f"expected the attention output, a tensor of shape (9, 5) (rows, d_v), got {got}"
    right = torch.softmax(s, dim=-1) @ v
    right[6] = 0.0  # the row with no allowed key: zeros, as in attnlib
    keyed = [0, 1, 2, 3, 4, 5, 7, 8]  # rows with at least one allowed key
    far = [7, 8]  # rows whose two maxima are about 100 apart
    nan = torch.isnan(out).any(dim=-1).nonzero().flatten().tolist()
    if nan == [6]:
        return False, ("row 6 has no allowed key in either half (m1 = m2 = -inf, l1 = l2 = 0) and its output is NaN "
                       "(from exp(-inf - (-inf)) or from 0 / 0): give zeros there, as attnlib does for a fully "
                       "masked row")
    near = [0, 1, 2, 3, 4, 5]
    if torch.allclose(out[near], right[near], atol=1e-5) and not (
            torch.isfinite(out[far]).all() and torch.allclose(out[far], right[far], atol=1e-5)):
        return False, ("rows 7 and 8 have both halves allowed, with maxima about 100 apart, and their output is wrong "
                       "or not finite: exp of a positive difference overflows (float32 ends near exp(88)); rescale "
                       "both halves to the larger of the two maxima, so that every exponent is at most 0")
    if nan:
        return False, f"NaN in rows {nan}"
    if torch.allclose(out[keyed], right[keyed], atol=1e-5) and not torch.allclose(out[6], right[6]):
        return False, "row 6 has no allowed key in either half: its output should be zeros, as attnlib gives"
    if torch.allclose(out, right, atol=1e-5):
        return True, "both halves brought to the common maximum before they were added, and the empty row gives zeros"
    m1, l1, a1 = _half_stats(s[:, :6], v[:6])
    m2, l2, a2 = _half_stats(s[:, 6:], v[6:])
    rows = slice(0, 4)  # rows where both halves hold allowed keys
    if torch.allclose(out[rows], ((a1 + a2) / (l1 + l2))[rows], atol=1e-5):
        return False, ("each half's l and acc are still measured against its own maximum; they cannot be added "
                       "until they are measured against the same one")
    if torch.allclose(out[rows], ((a1 / l1 + a2 / l2) / 2)[rows], atol=1e-5):
        return False, ("that averages the two halves' outputs with equal weight; a half should count in proportion "
                       "to the softmax weight its keys hold")
    return False, "the output differs from attention over all twelve keys (softmax of the scores, times the values)"


def _pooled(weight: torch.Tensor, h: int, g: int, consecutive: bool = True, reduce: str = "mean") -> torch.Tensor:
    """(h * d_k, ...) rows of h heads -> (g * d_k, ...) rows of g heads, averaging each group of h/g heads."""
    d_k = weight.shape[0] // h
    heads = weight.reshape(h, d_k, *weight.shape[1:])
    groups = heads.reshape(g, h // g, *heads.shape[1:]) if consecutive else \
        heads.reshape(h // g, g, *heads.shape[1:]).transpose(0, 1)  # strided: heads i, i + g, ...
    pooled = groups.mean(1) if reduce == "mean" else groups.sum(1)
    return pooled.reshape(g * d_k, *weight.shape[1:])


@checker("12.2")
def pool_kv_heads(answer) -> tuple[bool, str]:
    """A function ``fn(mha, g) -> MultiHeadAttention(d_model, h, num_kv_heads=g)``: the queries and output
    projection of ``mha`` unchanged, each group of h/g consecutive key/value heads averaged into one."""
    from ..multihead import MultiHeadAttention

    require(callable_problem(answer, "a function fn(mha, g)"))
    torch.manual_seed(12)
    mha = MultiHeadAttention(32, 8).eval()
    before = {k: t.clone() for k, t in mha.state_dict().items()}
    for g in (4, 2, 1, 8):
        with torch.no_grad():
            gqa = answer(mha, g)
        if not isinstance(gqa, MultiHeadAttention):
            return False, f"expected a MultiHeadAttention, got {type(gqa).__name__}"
        if any(not torch.equal(t, mha.state_dict()[k]) for k, t in before.items()):
            return False, "the original layer's weights changed: copy into the new layer, leave mha as it was"
        if gqa.num_heads != 8 or gqa.num_kv_heads != g:
            return False, (f"for g={g} expected 8 query heads and {g} key/value heads, got {gqa.num_heads} and "
                           f"{gqa.num_kv_heads}: MultiHeadAttention(d_model, num_heads, num_kv_heads=g)")
        for name in ("w_q", "w_o"):
            for part in ("weight", "bias"):
                if not torch.equal(getattr(getattr(gqa, name), part), getattr(getattr(mha, name), part)):
                    return False, f"{name}.{part} must be mha's, unchanged: only keys and values are shared"
        for name in ("w_k", "w_v"):
            for part in ("weight", "bias"):
                got, theirs = getattr(getattr(gqa, name), part), getattr(getattr(mha, name), part)
                right = _pooled(theirs, 8, g)
                if torch.allclose(got, right, atol=1e-6):
                    continue
                if g < 8 and torch.allclose(got, _pooled(theirs, 8, g, consecutive=False), atol=1e-6):
                    return False, (f"g={g}, {name}.{part}: you pooled heads i, i + g, i + 2g, ...; a group is h/g "
                                   "CONSECUTIVE heads (query head i reads key/value head i // (h/g))")
                if g < 8 and torch.allclose(got, _pooled(theirs, 8, g, reduce="sum"), atol=1e-6):
                    return False, f"g={g}, {name}.{part}: summed over the group; average it (the mean of the heads)"
                return False, f"g={g}: {name}.{part} is not the mean of each group of {8 // g} consecutive heads' rows"
    return True, "queries and output kept, each group of consecutive key/value heads averaged, weights and biases"


def _window_reference(q, k, v, window: int) -> torch.Tensor:
    offset = torch.arange(q.shape[-2])[:, None] - torch.arange(k.shape[-2])[None, :]  # (L, L): i - j
    allowed = (offset >= 0) & (offset < window)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def _tiles_needed(L: int, window: int, block: int) -> int:
    """Key tiles that hold at least one allowed key, over all query tiles."""
    count = 0
    for qs in range(0, L, block):
        qe = min(qs + block, L)
        first, last = max(0, qs - window + 1) // block, (qe - 1) // block
        count += last - first + 1
    return count


class _CountWork(TorchDispatchMode):
    """Counts the multiply-adds of every matrix product and attention kernel (torch's FLOP formulas, plus the CPU
    attention kernel, which they do not cover) and remembers the largest floating-point tensor any operation made."""

    SDPA = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention"}

    ELEMENTWISE_PRODUCT = {torch.ops.aten.mul, torch.ops.aten.mul_}
    REDUCTION = {torch.ops.aten.sum}

    def __init__(self):
        super().__init__()
        self.flops, self.largest = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        if packet.__name__ in self.SDPA:
            q, k = args[0], args[1]  # (..., Lq, d), (..., Lk, d): scores and weights @ values, all Lq x Lk entries
            self.flops += 4 * q.shape[:-1].numel() * k.shape[-2] * q.shape[-1]
        elif packet in flop_registry:
            self.flops += flop_registry[packet](*args, **(kwargs or {}), out_val=out)
        elif packet in self.ELEMENTWISE_PRODUCT and isinstance(out, torch.Tensor) and out.is_floating_point():
            self.flops += out.numel()  # products written out by hand (q * k, weights * v) count as work too
        elif packet in self.REDUCTION and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
            self.flops += args[0].numel()  # ... and the sums that finish them
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return out


@checker("12.3")
def window_tiles(answer) -> tuple[bool, str]:
    """A function ``fn(q, k, v, window, block_size) -> (..., L, d_v)``: sliding-window attention computed tile by
    tile (query i sees keys i - window + 1 .. i) that skips every tile with no allowed key in it.

    The work is counted, not the calls: the FLOPs of all matrix products and attention kernels must stay within
    1.25 x those of the tiles that hold an allowed key (4 * bq * bk * d per tile and head: scores, then weights @
    values) and be at least those of the allowed (query, key) pairs themselves (4 * d each). Elementwise products
    and their sums count too (one FLOP per product and per summed number), so scores written out by hand cannot
    hide work; and no floating-point tensor may be as large as half the (L, L) scores of all heads."""
    require(callable_problem(answer, "a function fn(q, k, v, window, block_size)"))
    g = torch.Generator().manual_seed(123)
    cases = [(100, 20, 32), (256, 40, 32), (70, 1, 16), (50, 64, 16), (96, 32, 32)]  # (L, window, block)
    for L, window, block in cases:
        q, k, v = (torch.randn(1, 2, L, 8, generator=g) for _ in range(3))
        with torch.no_grad():
            out = answer(q, k, v, window, block)
        if not isinstance(out, torch.Tensor) or out.shape != q.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return False, f"expected an output of shape {tuple(q.shape)} (like q), got {got}"
        right = _window_reference(q, k, v, window)
        if not torch.allclose(out, right, atol=1e-5):
            row = int((out - right).abs().amax(dim=(0, 1, 3)).gt(1e-5).nonzero()[0])
            if window > 1 and torch.allclose(out, _window_reference(q, k, v, window + 1), atol=1e-5):
                return False, (f"L={L}, window={window}: each query sees one key too many; the window counts the token "
                               "itself, so query i sees keys i - window + 1 .. i")
            if torch.allclose(out, _window_reference(q, k, v, window - 1), atol=1e-5) and window > 1:
                return False, (f"L={L}, window={window}: each query sees one key too few; query i sees keys "
                               "i - window + 1 .. i, the token itself included")
            return False, (f"L={L}, window={window}, block {block}: query row {row} differs from attention with the "
                           "window mask (a tile skipped that still held allowed keys, or the mask inside a tile)")
    (B, h, L, d), window, block = (2, 2, 512, 8), 40, 32
    q, k, v = (torch.randn(B, h, L, d, generator=g) for _ in range(3))
    work = _CountWork()
    with torch.no_grad(), work:
        answer(q, k, v, window, block)
    needed, causal = _tiles_needed(L, window, block), _tiles_needed(L, L, block)
    per_tile = 4 * B * h * block * block * d
    if work.largest >= B * h * L * L // 2:
        return False, (f"right output, but for L={L} one of your tensors holds {work.largest:,} numbers, as many as "
                       f"the (L, L) scores of all heads: that is dense attention; compute one tile at a time")
    allowed = sum(min(i + 1, window) for i in range(L))  # (query, key) pairs the window allows, per head
    if work.flops < 4 * B * h * d * allowed:
        return False, (f"right output, but for L={L}, window={window} your products do less work than the allowed "
                       f"scores alone need: compute each tile's scores and weighted sum with products the check can "
                       f"count (matrix products, attention kernels, or elementwise products and their sums)")
    if work.flops > 1.25 * needed * per_tile:
        return False, (f"right output, but for L={L}, window={window}, block {block} your products do the work "
                       f"of {work.flops / per_tile:.0f} tiles, and only {needed} tiles hold an allowed key; skip the "
                       f"tiles that lie entirely before the window too, not only those in the future ({causal} tiles)")
    return True, (f"right output, and the work of {work.flops / per_tile:.0f} tiles where {needed} tiles hold allowed "
                  f"keys (causal skipping alone computes {causal})")


@checker("12.4")
def rope_layouts(answer, d: int = 16) -> tuple[bool, str]:
    """A permutation ``perm (d,)`` of the dimensions with ``rope_half(x)[..., perm] == rope(x[..., perm])`` for every
    ``x``: reading rotate-half vectors in the interleaved layout."""
    from ..positional import RotaryEmbedding

    if isinstance(answer, (list, tuple)):
        answer = torch.tensor(answer)
    if not isinstance(answer, torch.Tensor) or answer.dtype not in (torch.int64, torch.int32) or answer.dim() != 1:
        return False, f"expected a 1-D tensor (or list) of {d} integer indices, got {type(answer).__name__}"
    if answer.shape[0] != d or sorted(answer.tolist()) != list(range(d)):
        return False, f"expected a permutation of 0..{d - 1}: each dimension exactly once"
    perm = answer.long()
    if torch.equal(perm, torch.arange(d)):
        return False, "that leaves every dimension where it is: the two layouts pair different dimensions"
    interleaved, half = RotaryEmbedding(d), RotaryEmbedding(d, interleaved=False)
    x = torch.randn(9, d, dtype=torch.float64, generator=torch.Generator().manual_seed(44))
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 999, 4096, 50_000])
    if torch.allclose(half(x, positions)[:, perm], interleaved(x[:, perm], positions), atol=1e-9):
        return True, "rotate-half pair (i, i + d/2) lands on interleaved pair (2i, 2i + 1): the same rotation"
    # interleaved position j turns at frequency j // 2; rotate-half dimension k at frequency k % (d / 2)
    wrong = [j for j in range(d) if int(perm[j]) % (d // 2) != j // 2]
    if wrong:
        j = wrong[0]
        return False, (f"interleaved position {j} turns at frequency {j // 2}, but your list puts rotate-half "
                       f"dimension {int(perm[j])} there, which turns at frequency {int(perm[j]) % (d // 2)}")
    return False, ("after your reordering the two layouts still rotate the dimensions differently: find which "
                   "dimensions each layout turns together, and by which angle")
