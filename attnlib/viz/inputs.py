"""The widgets' inputs, checked once and turned into an :class:`~attnlib.viz.state.AttentionState`.

Weights must be finite. Without ``raw_scores=True`` they must also be >= 0 and every row must
sum to 1 (within ROW_SUM_TOL; a low-precision input within its epsilon, e.g. bfloat16's 0.0078)
or be all zeros (a query masked out entirely). ``mask`` follows attnlib's one rule (bool, True =
may attend; ``(Lq, Lk)`` or the full rank of the weights) and is checked by
``attnlib._checks.check_attention_mask``. Every error names what was expected and what arrived.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .._checks import check_attention_mask, to_numpy
from .state import LEVELS, SCALES, AttentionState, map_stats

FILL_BELOW = -1e4  # raw scores at or below this are masked fills (e.g. -1e9), not scores
ROW_SUM_TOL = 1e-3  # |row sum - 1| allowed for softmax weights (half precision: its epsilon, if larger)


def row_tolerance(x: Any) -> float:
    """ROW_SUM_TOL, or the machine epsilon of a low-precision input (bfloat16 rows are off by ~4e-3)."""
    dtype = x.dtype if isinstance(x, (torch.Tensor, np.ndarray)) else None
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return max(ROW_SUM_TOL, torch.finfo(dtype).eps)
    if isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.floating):
        return max(ROW_SUM_TOL, float(np.finfo(dtype).eps))
    return ROW_SUM_TOL


def stack_layers(weights: Any) -> tuple[np.ndarray, float]:
    """An explorer's weights as ``(layers, heads, Lq, Lk)`` float64, and their row-sum tolerance: a 4-D
    tensor/array, or a list of per-layer ``(heads, Lq, Lk)`` tensors (a model's maps, batch squeezed)."""
    if not isinstance(weights, (list, tuple)):
        w = to_numpy(weights, "weights")
        tol = row_tolerance(weights)
    else:
        per_layer = [to_numpy(x, f"weights[{i}]") for i, x in enumerate(weights)]
        if not per_layer:
            raise ValueError("weights is an empty list; expected one (heads, Lq, Lk) tensor per layer")
        for i, x in enumerate(per_layer):
            if x.ndim != 3 or x.shape != per_layer[0].shape:
                hint = "; squeeze the batch: [a[0] for a in weights]" if x.ndim == 4 and x.shape[0] == 1 else ""
                raise ValueError(f"weights[{i}] has shape {tuple(x.shape)} but every layer must be 3-D "
                                 f"(heads, Lq, Lk) like weights[0] {tuple(per_layer[0].shape)}{hint}")
        w, tol = np.stack(per_layer), row_tolerance(weights[0])                      # (layers, heads, Lq, Lk)
    if w.ndim != 4:
        hint = {2: "; for one map use AttentionHeatmap", 3: "; for one layer pass weights[None]",
                5: "; squeeze the batch of one: weights[0]"}.get(w.ndim, "")
        raise ValueError(f"weights must be 4-D (layers, heads, Lq, Lk), got shape {tuple(w.shape)} ({w.ndim}-D){hint}")
    if 0 in w.shape[:2]:
        raise ValueError(f"weights must hold at least one layer and one head, got shape {tuple(w.shape)}")
    return w, tol


def token_list(tokens: Any, name: str) -> list[str]:
    """Token labels as strings; a single string or an empty list is refused."""
    if isinstance(tokens, str):
        raise ValueError(f"{name} must be a sequence of tokens, not a single string {tokens!r}; try {name}=list(...)")
    if hasattr(tokens, "tolist"):
        tokens = tokens.tolist()
    labels = [str(t) for t in tokens]
    if not labels:
        raise ValueError(f"{name} is empty; the map needs at least one token on each axis")
    return labels


def _where(idx: tuple[int, ...], ndim: int) -> str:
    """``(layer 0, head 1, query 3)`` for an index into an ``ndim``-D array of maps (or its row sums)."""
    names = ("layer", "head", "query", "key")[4 - ndim:]
    return "(" + ", ".join(f"{n} {i}" for n, i in zip(names, idx)) + ")"


def check_values(w: np.ndarray, raw_scores: bool, tol: float = ROW_SUM_TOL) -> None:
    """NaN/inf always fail; softmax weights must be >= 0 with rows summing to 1 (or all 0)."""
    bad = ~np.isfinite(w)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"weights contain {int(bad.sum())} NaN or infinite value(s), the first at "
                         f"{_where(first, w.ndim)}: {w[first]}; fill masked scores with a finite number")
    if raw_scores:
        return
    if (w < 0).any():
        first = tuple(int(i) for i in np.argwhere(w < 0)[0])
        raise ValueError(f"weights contain negative values (e.g. {w[first]:.4g} at {_where(first, w.ndim)}), but attention "
                         "weights are >= 0; pass raw_scores=True to show unnormalised scores")
    sums = w.sum(axis=-1)
    ok = (np.abs(sums - 1.0) <= tol) | (w == 0).all(axis=-1)
    if not ok.all():
        first = tuple(int(i) for i in np.argwhere(~ok)[0])
        raise ValueError(f"the row at {_where(first, w.ndim)} of weights sums to {sums[first]:.4f}, not 1 (tolerance "
                         f"{tol:.2g}); softmax weights sum to 1 over the keys (an all-zero masked row is allowed). "
                         "Pass raw_scores=True to show unnormalised scores")


def colormap_lut(cmap: str) -> np.ndarray:
    """The ``(LEVELS, 3)`` uint8 lookup table of a matplotlib colormap."""
    import matplotlib

    try:
        lut = matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, LEVELS))[:, :3]
    except KeyError as err:
        raise ValueError(f"cmap must be a matplotlib colormap name such as 'viridis', got {cmap!r}") from err
    return np.round(lut * 255).astype(np.uint8)


def mask_colour(lut: np.ndarray) -> tuple[int, int, int]:
    """The candidate colour farthest from every colour of the palette: masked cells never look like a value."""
    candidates = np.array([[225, 225, 225], [255, 255, 255], [128, 128, 128], [0, 0, 0]], float)  # greys
    dist = np.sqrt(((candidates[:, None, :] - lut[None].astype(float)) ** 2).sum(-1)).min(axis=1)  # (4,)
    return tuple(int(c) for c in candidates[int(dist.argmax())])


def parse_scale(scale: Any) -> tuple[str, float | None, float | None]:
    """``"layer"``/``"map"``/``"model"`` or ``(vmin, vmax)`` -> (scale trait, vmin, vmax)."""
    if isinstance(scale, str):
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES} or a (vmin, vmax) pair, got {scale!r}")
        return scale, None, None
    try:
        lo, hi = (float(v) for v in scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale must be one of {SCALES} or a (vmin, vmax) pair of numbers, got {scale!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"scale (vmin, vmax) must be finite with vmin < vmax, got ({lo}, {hi})")
    return "fixed", lo, hi


def _allowed(mask: Any, w: np.ndarray, heatmap: bool, raw_scores: bool) -> np.ndarray:
    """Which cells of ``w (layers, heads, Lq, Lk)`` are drawn as values: the mask's True cells (all when
    None), and with raw scores only those above FILL_BELOW. A weight under a False cell must be 0."""
    allowed = np.ones(w.shape, bool)
    if mask is not None:
        m = torch.as_tensor(np.asarray(mask.detach().cpu() if isinstance(mask, torch.Tensor) else mask))
        target, names = (w.shape[2:], ("Lq", "Lk")) if heatmap else (w.shape, ("layers", "heads", "Lq", "Lk"))
        check_attention_mask(m, target, names)
        allowed = np.broadcast_to(m.numpy(), w.shape)                              # (layers, heads, Lq, Lk)
        if not raw_scores and (np.abs(w[~allowed]) > 1e-6).any():
            first = tuple(int(i) for i in np.argwhere(~allowed & (np.abs(w) > 1e-6))[0])
            shown = first[2:] if heatmap else first
            raise ValueError(f"mask says the cell at {_where(shown, len(shown))} may not attend, but its weight is "
                             f"{w[first]:.4g}, not 0; is the mask inverted (True = may attend)?")
    return allowed & (w > FILL_BELOW) if raw_scores else allowed


def build_state(kind: str, w: np.ndarray, query_tokens: Any, key_tokens: Any = None,
                layer_names: Sequence[str] | None = None, raw_scores: bool = False, cmap: str | None = None,
                tol: float = ROW_SUM_TOL, mask: Any = None, scale: Any = "layer") -> AttentionState:
    """Check everything about ``w (layers, heads, Lq, Lk)`` float64 (a heatmap's is ``(1, 1, Lq, Lk)``) and
    return its state, with nothing selected and layer 0, head 0 on display."""
    heatmap = kind == "heatmap"
    shape, (L, _, Lq, Lk) = tuple(w.shape[2:] if heatmap else w.shape), w.shape
    q = token_list(query_tokens, "query_tokens")
    k = q if key_tokens is None else token_list(key_tokens, "key_tokens")
    if len(q) != Lq:
        raise ValueError(f"query_tokens has {len(q)} tokens but weights has shape {shape}, i.e. {Lq} query rows")
    if len(k) != Lk:
        which = "key_tokens" if key_tokens is not None else "key_tokens=None (self-attention: keys = query_tokens), so it"
        raise ValueError(f"{which} has {len(k)} tokens but weights has shape {shape}, i.e. {Lk} key columns"
                         + ("; pass key_tokens for cross-attention" if key_tokens is None else ""))
    names = [f"layer {i}" for i in range(L)] if layer_names is None else [str(n) for n in layer_names]
    if len(names) != L:
        raise ValueError(f"layer_names has {len(names)} names but weights has shape {tuple(w.shape)}, i.e. {L} layers")
    check_values(w[0, 0] if heatmap else w, raw_scores, tol)
    allowed = _allowed(mask, w, heatmap, raw_scores)
    lut = colormap_lut(cmap or ("RdBu_r" if raw_scores else "viridis"))
    scale_name, vmin, vmax = parse_scale(scale)
    weights = w.astype(np.float32)
    lo, hi, rest = map_stats(weights, allowed)
    return AttentionState(kind=kind, weights=weights, mask=np.ascontiguousarray(allowed), query_tokens=tuple(q),
                          key_tokens=tuple(k), layer_names=tuple(names), palette=lut, mask_rgb=mask_colour(lut),
                          raw_scores=bool(raw_scores), map_lo=lo, map_hi=hi, map_rest=rest, scale=scale_name,
                          vmin=vmin, vmax=vmax)
