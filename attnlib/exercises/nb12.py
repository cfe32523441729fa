"""Checkers for notebook 12's exercises (online softmax, pooling heads into GQA, a sliding window that skips tiles)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem


def _stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.amax(dim=-1, keepdim=True)
    safe = torch.where(m == float("-inf"), 0.0, m)
    return m, torch.exp(x - safe).sum(dim=-1, keepdim=True)


@checker("12.1")
def combine_stats(answer) -> tuple[bool, str]:
    """A function ``combine(m1, l1, m2, l2) -> (m, l)`` merging the softmax statistics of two blocks."""
    require(callable_problem(answer, "a function combine(m1, l1, m2, l2)"))
    g = torch.Generator().manual_seed(12)
    a = torch.randn(6, 7, generator=g) * 4
    b = torch.randn(6, 5, generator=g) * 4 + torch.linspace(-8, 8, 6)[:, None]  # some rows: b's maximum is larger
    a[4] = float("-inf")  # a block with nothing allowed in it
    a[5], b[5] = float("-inf"), float("-inf")  # a row with nothing allowed at all
    m, l = answer(*_stats(a), *_stats(b))
    if not (isinstance(m, torch.Tensor) and isinstance(l, torch.Tensor)):
        return False, "combine must return two tensors (m, l)"
    want_m, want_l = _stats(torch.cat((a, b), dim=-1))
    if m.shape != want_m.shape or l.shape != want_l.shape:
        return False, f"expected m and l of shape {tuple(want_m.shape)}, got {tuple(m.shape)} and {tuple(l.shape)}"
    if not torch.equal(m, want_m):
        return False, "m must be the larger of the two maxima (torch.maximum(m1, m2))"
    if torch.isnan(l).any():
        rows = torch.isnan(l).flatten().nonzero().flatten().tolist()
        return False, (f"l is NaN in rows {rows}: exp(-inf - (-inf)) is NaN; when the new maximum is -inf, "
                       "subtract 0 instead")
    ok = torch.allclose(l, want_l, rtol=1e-5, atol=0)
    if not ok:
        naive = torch.allclose(l[:5], (_stats(a)[1] + _stats(b)[1])[:5], rtol=1e-5)
        if naive:
            return False, "each l was summed under its own maximum: rescale l1 by exp(m1 - m) and l2 by exp(m2 - m)"
        return False, "l is not the sum of exp(x - m) over both blocks; rescale each l by exp(its m - the new m)"
    return True, "both sums rescaled to the common maximum, and the empty rows stay at l = 0"


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


class _CountMatmuls(torch.overrides.TorchFunctionMode):
    NAMES = {"matmul", "__matmul__", "__rmatmul__", "bmm", "mm", "einsum", "baddbmm"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.NAMES:
            self.count += 1
        return func(*args, **(kwargs or {}))


@checker("12.3")
def window_tiles(answer) -> tuple[bool, str]:
    """A function ``fn(q, k, v, window, block_size) -> (..., L, d_v)``: sliding-window attention computed tile by
    tile (query i sees keys i - window + 1 .. i) that skips every tile with no allowed key in it."""
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
    L, window, block = 512, 40, 32
    q, k, v = (torch.randn(1, 2, L, 8, generator=g) for _ in range(3))
    counter = _CountMatmuls()
    with torch.no_grad(), counter:
        answer(q, k, v, window, block)
    needed, causal = _tiles_needed(L, window, block), _tiles_needed(L, L, block)
    if counter.count > 2 * needed + 2:  # two products per tile: scores, then weights @ values
        return False, (f"right output, but {counter.count} matrix products for L={L}, window={window}, block {block}: "
                       f"only {needed} key tiles hold an allowed key (2 products each); skip the tiles that lie "
                       f"entirely before the window too, not only those in the future ({causal} tiles)")
    return True, (f"right output, and {counter.count} matrix products where {needed} tiles hold allowed keys "
                  f"(causal skipping alone visits {causal})")


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
    inverse = torch.argsort(perm)
    if torch.allclose(half(x, positions)[:, inverse], interleaved(x[:, inverse], positions), atol=1e-9):
        return False, ("this is the inverse permutation: it takes interleaved vectors to the rotate-half layout; "
                       "you need new[j] = old[perm[j]] with old in the rotate-half layout")
    return False, ("after your reordering the rotations differ: dimensions i and i + d/2 (one rotate-half pair, "
                   "frequency i) must land side by side, at 2i and 2i + 1, in that order")
