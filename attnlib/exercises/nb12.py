"""Checkers for notebook 12's exercises (online softmax, KV-cache size, sliding-window reach)."""
from __future__ import annotations

import math

import torch

from . import checker


def _stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = x.amax(dim=-1, keepdim=True)
    safe = torch.where(m == float("-inf"), 0.0, m)
    return m, torch.exp(x - safe).sum(dim=-1, keepdim=True)


@checker("12.1")
def combine_stats(answer) -> tuple[bool, str]:
    """A function ``combine(m1, l1, m2, l2) -> (m, l)`` merging the softmax statistics of two blocks."""
    if not callable(answer):
        return False, f"expected a function combine(m1, l1, m2, l2), got {type(answer).__name__}"
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


@checker("12.2")
def kv_cache_bytes(answer) -> tuple[bool, str]:
    """Bytes of the KV cache for 32 layers, 32 query heads, 8 key/value heads, d_k 128, 8192 tokens, fp16, batch 1."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return False, f"expected a number of bytes, got {type(answer).__name__}"
    right = 2 * 32 * 8192 * 8 * 128 * 2
    if answer == right:
        return True, f"2 x 32 layers x 8192 tokens x 8 kv heads x 128 x 2 bytes = {right:,} bytes (1 GiB)"
    if answer == right // 2:
        return False, "that is half: the cache holds keys *and* values (the factor 2)"
    if answer == right * 4:
        return False, "you used the 32 query heads; only the 8 key/value heads are cached"
    if answer == right * 8:
        return False, "that counts bits, not bytes (fp16 is 2 bytes per number)"
    if answer == right * 2:
        return False, "fp16 is 2 bytes per number, not 4 (or you counted K and V twice)"
    if math.isclose(answer, right / 2**30) or math.isclose(answer, right / 2**20):
        return False, "give the answer in bytes, not GiB or MiB"
    return False, f"{answer:,} is not it; multiply 2 (K and V) x layers x tokens x kv heads x d_k x bytes per number"


@checker("12.3")
def window_reach(answer) -> tuple[bool, str]:
    """A function ``reach(depth, window, n)``: how many input positions the last of n tokens depends on."""
    if not callable(answer):
        return False, f"expected a function reach(depth, window, n), got {type(answer).__name__}"
    cases = [(1, 4, 64), (3, 4, 64), (2, 1, 10), (5, 8, 20), (4, 16, 1000)]
    for depth, window, n in cases:
        right = min(n, depth * (window - 1) + 1)
        got = answer(depth, window, n)
        if got == right:
            continue
        if got == min(n, depth * window):
            return False, (f"reach({depth}, {window}, {n}) = {got}: each extra layer adds window - 1 new tokens, "
                           "since the window includes the token itself")
        if got == depth * (window - 1) + 1:
            return False, f"reach({depth}, {window}, {n}) = {got}, more than the {n} tokens there are: cap it at n"
        if got == min(n, depth * (window - 1)):
            return False, f"reach({depth}, {window}, {n}) = {got}: the token itself counts too (+1)"
        return False, f"reach({depth}, {window}, {n}) should be {right}, got {got}"
    return True, "depth x (window - 1) + 1, capped at n"
