"""Checkers for notebook 12's exercises (merging two halves of the keys, pooling heads into GQA, a sliding window that
skips tiles, a RoPE layer moved from the rotate-half layout to the interleaved one)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
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
    if not out.is_floating_point():
        return False, f"expected a floating-point output, got dtype {out.dtype}"
    out = out.to(s.dtype)  # a right answer computed in float64 is right too
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
    hide work; and no floating-point tensor may be as large as half the (L, L) scores of all heads. When the work is
    too large, two more calls name the cause: one tile as long as the sequence (scores computed more than once), then
    a window as long as the sequence (tiles in the future, or dense attention); otherwise the tiles before the window
    were not skipped. An output in another floating-point dtype (float64) is compared after conversion."""
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
        if not out.is_floating_point():
            return False, f"expected a floating-point output, got dtype {out.dtype}"
        out = out.to(q.dtype)  # a right answer computed in float64 is right too
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

    def tiles_of_work(window: int, block: int) -> tuple[float, int]:
        """The work of one call, in (block, block) tiles of all heads, and the largest tensor it made."""
        work = _CountWork()
        with torch.no_grad(), work:
            answer(q, k, v, window, block)
        return work.flops / (4 * B * h * block * block * d), work.largest

    tiles, largest = tiles_of_work(window, block)
    needed, causal = _tiles_needed(L, window, block), _tiles_needed(L, L, block)
    if largest >= B * h * L * L // 2:
        return False, (f"right output, but for L={L} one of your tensors holds {largest:,} numbers, as many as "
                       f"the (L, L) scores of all heads: that is dense attention; compute one tile at a time")
    allowed = sum(min(i + 1, window) for i in range(L))  # (query, key) pairs the window allows, per head
    if tiles * 4 * B * h * block * block * d < 4 * B * h * d * allowed:
        return False, (f"right output, but for L={L}, window={window} your products do less work than the allowed "
                       f"scores alone need: compute each tile's scores and weighted sum with products the check can "
                       f"count (matrix products, attention kernels, or elementwise products and their sums)")
    if tiles > 1.25 * needed:
        # Too much work. Two more calls tell the causes apart: with one tile as long as the sequence, nothing can be
        # skipped, so more than 1.25 tiles of work means scores computed more than once; with a window as long as
        # the sequence, every tile on or before the diagonal is needed, so more than 1.25 x those means tiles in the
        # future (or the whole (L, L) product); otherwise the excess is in the tiles before the window.
        whole, _ = tiles_of_work(L, L)
        if whole > 1.25:
            return False, (f"right output, but with one tile as long as the sequence (L={L}, block {L}) your "
                           f"products do the work of {whole:.1f} such tiles: compute each score once (one "
                           f"pass with the online softmax, not one pass for the maximum and another for the sum)")
        no_window, _ = tiles_of_work(L, block)
        if no_window > 1.25 * causal:
            return False, (f"right output, but with a window as long as the sequence (L={L}, block {block}) your "
                           f"products do the work of {no_window:.0f} tiles, and only {causal} tiles lie on or before "
                           f"the diagonal: you compute tiles in the future too, or dense attention")
        return False, (f"right output, but for L={L}, window={window}, block {block} your products do the work "
                       f"of {tiles:.0f} tiles, and only {needed} tiles hold an allowed key; skip the tiles that lie "
                       f"entirely before the window too, not only those in the future ({causal} tiles)")
    return True, (f"right output, and the work of {tiles:.0f} tiles where {needed} tiles hold allowed "
                  f"keys (causal skipping alone computes {causal})")


def _row_sources(new: torch.Tensor, old: torch.Tensor) -> list[int | None]:
    """For each row of ``new``, the index of the row of ``old`` it is (up to its sign), or None."""
    gap = torch.minimum(torch.cdist(new, old), torch.cdist(new, -old))  # (rows, rows)
    best = gap.min(dim=1)
    return [int(i) if v < 1e-5 else None for v, i in zip(best.values.tolist(), best.indices.tolist())]


def _rope_scores(layer, x: torch.Tensor, positions: torch.Tensor, rotary) -> torch.Tensor:
    """(B, h, L, L) scores q · k of every query head against its key/value head, rotated at ``positions``; float64."""
    def rows(lin, heads):
        out = F.linear(x, lin.weight.double(), None if lin.bias is None else lin.bias.double())  # (B, L, heads * d_k)
        return rotary(out.view(*x.shape[:2], heads, layer.d_k).transpose(1, 2), positions)   # (B, heads, L, d_k)
    q, k = rows(layer.w_q, layer.num_heads), rows(layer.w_k, layer.num_kv_heads)
    return q @ k.repeat_interleave(layer.num_heads // layer.num_kv_heads, 1).transpose(-2, -1)


_TURN_NAMES = {0: "not turned", 90: "given a quarter turn", 180: "given a half turn",
               270: "given three quarters of a turn"}


def _where_rows_went(new, old, heads: int, d_k: int, name: str, what: str) -> tuple[str | None, list[list[int]]]:
    """A sentence on the first row of ``new`` that is not where the interleaved layout needs it (or None), and,
    when every pair is right up to a rotation, how far each head's pair i is turned: 0, 90, 180 or 270 degrees."""
    half = d_k // 2
    new_w, old_w = new.weight.detach().double(), old.weight.detach().double()
    sources = _row_sources(new_w, old_w)
    if None in sources:
        return (f"row {sources.index(None)} of the new {name}.weight is none of mha's {name} rows (up to its sign): "
                "the conversion only moves rows, it does not change them"), []
    if sources == list(range(len(sources))):
        return (f"the rows of the new {name} are where they were in mha; the interleaved layout turns other "
                f"dimensions together than rotate-half does, so the {what} rows must move too"), []
    for r, s in enumerate(sources):
        if r // d_k != s // d_k:
            return (f"row {r % d_k} of {what} head {r // d_k} in the new {name} came from {what} head {s // d_k} of "
                    f"mha: {name} has {heads} heads of {d_k} rows, and rows stay inside their head"), []
    # +1 where the new row is mha's row, -1 where it is mha's row negated
    signs = [1 if torch.allclose(new_w[r], old_w[s], atol=1e-5) else -1 for r, s in enumerate(sources)]
    turns = []
    for head in range(heads):
        src = [s % d_k for s in sources[head * d_k:(head + 1) * d_k]]  # rotate-half dimension of each new row
        sign = signs[head * d_k:(head + 1) * d_k]
        for s in range(d_k):
            if src.count(s) > 1:
                unused = next(t for t in range(d_k) if t not in src)
                times = "twice" if src.count(s) == 2 else f"{src.count(s)} times"
                return (f"in {what} head {head} of the new {name}, rotate-half row {s} is used {times} and row "
                        f"{unused} not at all: each row moves, none is copied"), []
        for j, s in enumerate(src):
            if s % half != j // 2:
                return (f"in {what} head {head} of the new {name}, interleaved dimension {j} turns at frequency "
                        f"{j // 2}, but the row there is rotate-half dimension {s}, which turns at frequency "
                        f"{s % half}"), []
        head_turns = []
        for i in range(half):
            swapped, same_sign = src[2 * i] >= half, sign[2 * i] == sign[2 * i + 1]
            if swapped and same_sign:
                return (f"in {what} head {head} of the new {name}, interleaved pair ({2 * i}, {2 * i + 1}) holds the "
                        "right two rotate-half dimensions in the wrong order, so the pair turns the other way"), []
            if not swapped and not same_sign:
                return (f"in {what} head {head} of the new {name}, one row of interleaved pair ({2 * i}, {2 * i + 1}) "
                        "is negated: a lone minus sign mirrors the pair, so it turns the other way; moving rows does "
                        "not change their sign"), []
            # what is left is a rotation of the right pair: (a, b), (-a, -b), or a quarter turn of it, (-b, a) or (b, -a)
            head_turns.append(90 if swapped and sign[2 * i] < 0 else 270 if swapped else 0 if sign[2 * i] > 0 else 180)
        turns.append(head_turns)
    if (new.bias is None) != (old.bias is None):
        return f"mha's {name} has a bias and the new layer's has none: each row's bias moves with its row", []
    if new.bias is not None:
        moved = old.bias.detach()[torch.tensor(sources)] * torch.tensor(signs, dtype=old.bias.dtype)
        if not torch.allclose(new.bias.detach(), moved, atol=1e-6):
            return (f"the rows of {name}.weight moved, but {name}.bias did not move with them: each row's bias goes "
                    "with its row, and takes its sign"), []
    return None, turns


@checker("12.4")
def rope_layer_to_interleaved(answer) -> tuple[bool, str]:
    """A function ``fn(mha) -> MultiHeadAttention``: ``mha`` rotates queries and keys in the rotate-half layout
    (``RotaryEmbedding(d_k, interleaved=False)``); the returned layer rotates adjacent pairs (``RotaryEmbedding(d_k)``,
    same base) and gives the same scores at every position and the same output. The scores are compared first;
    when they differ, the rows of w_q and w_k are traced to say which dimension landed where."""
    from ..gguf_io import permute_rope_rows
    from ..multihead import MultiHeadAttention
    from ..positional import RotaryEmbedding
    from .nb13 import _forbidden_call

    require(callable_problem(answer, "a function fn(mha)"))
    g = torch.Generator().manual_seed(124)
    for d_model, h, kv, base in ((32, 4, 2, 10000.0), (36, 3, 1, 500.0)):
        with torch.random.fork_rng():  # the layer's initial weights, without moving the notebook's random state
            torch.manual_seed(124 + h)
            mha = MultiHeadAttention(d_model, h, num_kv_heads=kv,
                                     rotary=RotaryEmbedding(d_model // h, base, interleaved=False)).eval()
        with torch.no_grad():
            for lin in (mha.w_q, mha.w_k):
                lin.bias.normal_(generator=g)  # biases as large as the weights' rows: a bias left behind shows
        before = {k: t.clone() for k, t in mha.state_dict().items()}
        new, used = _forbidden_call({"attnlib's permute_rope_rows": permute_rope_rows}, answer, mha)
        require(used and f"your function calls {used}, which does this reordering for you: move the rows yourself")
        if not isinstance(new, MultiHeadAttention):
            return False, f"expected a MultiHeadAttention, got {type(new).__name__}"
        if mha.rotary is None or mha.rotary.interleaved or any(
                not torch.equal(t, mha.state_dict()[k]) for k, t in before.items()):
            return False, "the original layer changed: build a new layer and leave mha (weights and rotary) as it was"
        if (new.d_model, new.num_heads, new.num_kv_heads) != (d_model, h, kv):
            return False, (f"the new layer has d_model={new.d_model}, {new.num_heads} query heads and "
                           f"{new.num_kv_heads} key/value heads; mha has {d_model}, {h} and {kv}")
        if not isinstance(new.rotary, RotaryEmbedding) or not new.rotary.interleaved:
            return False, ("the new layer must rotate adjacent pairs: give it "
                           "rotary=RotaryEmbedding(d_k, mha.rotary.base), whose layout is interleaved")
        if new.rotary.base != mha.rotary.base:
            return False, (f"the new layer's RotaryEmbedding has base {new.rotary.base:g} and mha's has "
                           f"{mha.rotary.base:g}: keep mha's frequencies")
        x = torch.randn(2, 9, d_model, generator=g, dtype=torch.float64)
        positions = torch.tensor([0, 1, 2, 5, 17, 100, 999, 4096, 50_000])
        with torch.no_grad():
            theirs = _rope_scores(mha, x, positions, RotaryEmbedding(mha.d_k, base, interleaved=False).double())
            ours = _rope_scores(new, x, positions, RotaryEmbedding(mha.d_k, base).double())
        if not torch.allclose(ours, theirs, rtol=1e-5, atol=1e-4):
            turns = {}
            for name, heads, what in (("w_q", h, "query"), ("w_k", kv, "key/value")):
                problem, turns[name] = _where_rows_went(getattr(new, name), getattr(mha, name), heads, mha.d_k,
                                                        name, what)
                if problem:
                    return False, f"(h={h}, g={kv}) {problem}"
            for head in range(h):  # query head `head` reads key/value head head // (h / g)
                kv_head = head // (h // kv)
                for i, (tq, tk) in enumerate(zip(turns["w_q"][head], turns["w_k"][kv_head])):
                    if tq != tk:
                        return False, (f"(h={h}, g={kv}) interleaved pair ({2 * i}, {2 * i + 1}) is "
                                       f"{_TURN_NAMES[tq]} in query head {head} of the new w_q and "
                                       f"{_TURN_NAMES[tk]} in key/value head {kv_head} of the new w_k: a query and "
                                       "its key may both be turned, but by the same amount, or their score changes")
            return False, f"(h={h}, g={kv}) the scores differ from mha's"  # not reached: every cause is traced above
        xs = x.float()
        with torch.no_grad():
            same_out = torch.allclose(new(xs, xs, xs)[0], mha(xs, xs, xs)[0], atol=1e-5)
        if not same_out:
            return False, ("the scores are mha's, but the outputs differ: values are not rotated, so w_v and w_o "
                           "stay as they were")
    return True, ("same scores at every position and the same output, for every head and both layers: each head's "
                  "rows of w_q and w_k moved so that the dimensions rotate-half turns together sit side by side")
