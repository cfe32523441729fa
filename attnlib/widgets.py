"""Interactive attention maps for notebooks: hover a query to see where it looks, a key to see who looks at it.

Two anywidget widgets (JupyterLab 4, Notebook 7, VS Code). The browser code is the bundled
ES module ``static/attention.js`` (plus ``static/attention.css``): nothing from a CDN, no
build step. Hovering is handled in the browser (no kernel round trip).

* ``AttentionHeatmap(weights (Lq, Lk), query_tokens, key_tokens=None)``: one map.
* ``AttentionExplorer(weights (layers, heads, Lq, Lk), query_tokens, key_tokens=None)``:
  layer and head selectors (synced ``layer``, ``head``) and a grid of every layer x head on
  the same colour scale (click a thumbnail to open that head). Also accepts a list of
  per-layer ``(heads, Lq, Lk)`` tensors; squeeze a batch of one yourself (``weights[0]``).

Both directions: hover a query token (a label left of the map, a chip of the query strip, or
a row) to light its row; hover a key token (a label above the map, a chip of the key strip)
to light its column, "who attends here". Click pins (synced ``selected`` for a query,
``selected_key`` for a key); click again or press Escape to unpin. Keyboard: the widget is
focusable; arrow keys move the query (up/down) and key (left/right) cursor, Enter pins.
The readout gives exact values either way.

Colour you can trust: ``scale`` is ``"layer"`` (default: one scale shared by the heads of a
layer, so a head that peaks at 0.15 stays dim beside one that peaks at 0.99), ``"map"``,
``"model"``, or a fixed ``(vmin, vmax)``. A colour bar with numbers is always drawn. Weights
run from 0 to the largest weight of the group on viridis (perceptually uniform, readable with
the common colour-vision deficiencies); raw scores (``raw_scores=True``) use a diverging
palette centred on 0 whose limits ignore masked cells. ``mask`` (bool, True = may attend)
marks masked cells, drawn in a colour that the palette does not contain; with raw scores,
values <= ``FILL_BELOW`` (-1e4, e.g. a -1e9 fill) count as masked too.

Weights must be finite. Without ``raw_scores=True`` they must also be >= 0 and every row
must sum to 1 (within 1e-3; bfloat16 input within its epsilon, 0.0078) or be all zeros (a
query masked out entirely).

Two views (synced ``view``): ``"map"``, the matrix, and ``"lines"`` (bertviz's head view):
queries in a column on the left, keys on the right, one line per pair whose colour, opacity
and width follow the weight on the current scale; hover or click a token on either side.
Lines are offered up to ``LINES_MAX_TOKENS`` (64) tokens a side; above, ``view="lines"``
raises ValueError and the page's menu greys the option out.

Big explorers (more than ``EAGER_MAX_BYTES``, 16 MB, of float32 maps, e.g. 6 x 12 x 512) send
the page grid thumbnails and the exact map on display only; when the page switches layer or
head the kernel sends that map (the thumbnail stands in meanwhile). Their kernel-free export
carries every map in 8 bits, the map on display exact; values from an 8-bit map read "≈".

Where widgets cannot run (GitHub, nbviewer, a saved notebook opened before it runs), the
output carries ``image/png``: the map with tokens on its axes, a colour bar and the pinned
token marked (explorer: the grid of every layer x head beside it), and ``text/html`` with the
same picture. ``text/plain`` is a stable repr such as
``AttentionHeatmap(12 x 12 query x key tokens, selected=None)``. ``to_html(path)`` writes one
self-contained HTML page that works offline from ``file://``.

Stable ``data-testid`` attributes of the view (for tests and for notebook authors):
``attn-root`` (focusable; ``data-kind``, ``data-active-row``, ``data-hover-row``,
``data-active-col``, ``data-selected``, ``data-selected-key``, ``data-layer``, ``data-head``,
``data-scale``, ``data-view``, ``data-loading`` (1 while a big explorer's map is on its way),
``data-exact`` (0 when the values come from an 8-bit copy), ``data-render-ms``), ``title``, ``query-tokens`` / ``query-token-{i}`` and
``key-tokens`` / ``key-token-{j}`` (with ``data-weight`` and a ``title`` tooltip while a
column or row is lit), ``readout``, ``heatmap-canvas``, ``heatmap-overlay``, ``legend``,
``colorbar`` (``data-vmin``, ``data-vmax``), ``pinned-marker``, ``view-select``, ``lines-view``,
``lines-canvas`` (``data-row-h``, ``data-width``), ``lines-query-{i}``, ``lines-key-{j}``; explorer only:
``layer-select``, ``head-select``, ``scale-select``, ``head-grid``, ``thumb-{l}-{h}``.
"""
from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import anywidget
import numpy as np
import torch
import traitlets


__all__ = ["AttentionHeatmap", "AttentionExplorer"]

_STATIC = pathlib.Path(__file__).parent / "static"
FILL_BELOW = -1e4  # raw scores at or below this are masked fills (e.g. -1e9), not scores
SCALES = ("layer", "map", "model")
VIEWS = ("map", "lines")  # the matrix; or bertviz-style lines between a query column and a key column
LINES_MAX_TOKENS = 64  # the lines view draws Lq x Lk lines: refused above this many tokens on either side
EAGER_MAX_BYTES = 16_000_000  # an explorer whose float32 maps exceed this sends them on demand (see _lazy)
ROW_SUM_TOL = 1e-3  # |row sum - 1| allowed for softmax weights (half precision: its epsilon, if larger)


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """A float64 NumPy copy of a tensor / array / nested list."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch.Tensor or a NumPy array of numbers, got {type(x).__name__}") from err


# The mime type under which every widget output also carries its kernel-free export (see
# widget_render.export_state); Jupyter and GitHub ignore it, the static site renders it live.
EXPORT_MIME = "application/vnd.attnlib.widget+json"


class _OutOfRange(ValueError, traitlets.TraitError):
    """A bad ``selected``/``layer``/``head``: a ValueError that traitlets also rolls back."""


def _row_tolerance(x: Any) -> float:
    """ROW_SUM_TOL, or the machine epsilon of a low-precision input (bfloat16 rows are off by ~4e-3)."""
    dtype = x.dtype if isinstance(x, (torch.Tensor, np.ndarray)) else None
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return max(ROW_SUM_TOL, torch.finfo(dtype).eps)
    if isinstance(dtype, np.dtype) and np.issubdtype(dtype, np.floating):
        return max(ROW_SUM_TOL, float(np.finfo(dtype).eps))
    return ROW_SUM_TOL


def _token_list(tokens: Any, name: str) -> list[str]:
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


def _check_values(w: np.ndarray, raw_scores: bool, tol: float = ROW_SUM_TOL) -> None:
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


def _colormap_lut(cmap: str) -> np.ndarray:
    """The 256 x RGB uint8 lookup table of a matplotlib colormap."""
    import matplotlib

    try:
        lut = matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3]
    except KeyError as err:
        raise ValueError(f"cmap must be a matplotlib colormap name such as 'viridis', got {cmap!r}") from err
    return np.round(lut * 255).astype(np.uint8)


def _mask_colour(lut: np.ndarray) -> list[int]:
    """The candidate colour farthest from every colour of the palette: masked cells never look like a value."""
    candidates = np.array([[225, 225, 225], [255, 255, 255], [128, 128, 128], [0, 0, 0]], float)  # greys
    dist = np.sqrt(((candidates[:, None, :] - lut[None].astype(float)) ** 2).sum(-1)).min(axis=1)  # (4,)
    return [int(c) for c in candidates[int(dist.argmax())]]


def _parse_scale(scale: Any) -> tuple[str, float | None, float | None]:
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


def _mask_array(mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A bool mask (True = may attend) of shape (Lq, Lk) or the weights' full rank, broadcast to ``shape``."""
    m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask must be bool (True = may attend), got dtype {m.dtype}")
    ok = m.ndim in (2, len(shape)) and all(a in (1, b) for a, b in zip(m.shape[::-1], shape[::-1]))
    if not ok:
        raise ValueError(f"mask has shape {tuple(m.shape)} but weights have shape {shape}; expected (Lq, Lk) = "
                         f"{shape[-2:]} or the full shape {shape} (size-1 dimensions broadcast)")
    return np.broadcast_to(m, shape)


def _thumbnails(full: np.ndarray, side: int = 56) -> np.ndarray:
    """``(layers, heads, min(side, Lq), min(side, Lk))`` float32: each pixel the value of largest magnitude in its
    block of cells (peaks never vanish), NaN where the whole block is masked; the blocks the page uses."""
    Lq, Lk = full.shape[2:]
    rows = np.arange(min(side, Lq)) * Lq // min(side, Lq)  # block starts, as Math.floor(y * Lq / th) in the page
    cols = np.arange(min(side, Lk)) * Lk // min(side, Lk)
    hi = np.maximum.reduceat(np.maximum.reduceat(np.nan_to_num(full, nan=-np.inf), rows, axis=2), cols, axis=3)
    lo = np.minimum.reduceat(np.minimum.reduceat(np.nan_to_num(full, nan=np.inf), rows, axis=2), cols, axis=3)
    with np.errstate(invalid="ignore"):
        out = np.where(np.abs(hi) >= np.abs(lo), hi, lo)
    return np.where(np.isinf(hi) & np.isinf(lo), np.nan, out).astype("<f4")


class _AttentionWidget(anywidget.AnyWidget):
    """Shared traits, checks and reprs of the two widgets (the JS side is one module)."""

    _esm_path, _css_path = _STATIC / "attention.js", _STATIC / "attention.css"
    _esm = _esm_path
    _css = _css_path
    _kind = traitlets.Unicode("heatmap").tag(sync=True)
    _weights = traitlets.Bytes(b"").tag(sync=True)  # float32 little-endian, C order, shape _shape
    _mask = traitlets.Bytes(b"").tag(sync=True)  # uint8 per cell (1 = may attend), or empty: nothing masked
    _shape = traitlets.List(traitlets.Int(), [1, 1, 1, 1]).tag(sync=True)  # [layers, heads, Lq, Lk]
    _map_lo = traitlets.List(traitlets.Float()).tag(sync=True)  # per map (layer-major): smallest unmasked value (compare: of A and B)
    _map_hi = traitlets.List(traitlets.Float()).tag(sync=True)  # per map: largest unmasked value
    _palette = traitlets.Bytes(b"").tag(sync=True)  # 256 x RGB
    _mask_rgb = traitlets.List(traitlets.Int(), [225, 225, 225]).tag(sync=True)
    _query_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _key_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _layer_names = traitlets.List(traitlets.Unicode(), ["layer 0"]).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    raw_scores = traitlets.Bool(False).tag(sync=True)
    scale = traitlets.Unicode("layer").tag(sync=True)  # "layer" | "map" | "model" | "fixed" (then vmin, vmax)
    vmin = traitlets.Float(None, allow_none=True).tag(sync=True)
    vmax = traitlets.Float(None, allow_none=True).tag(sync=True)
    selected = traitlets.Int(None, allow_none=True).tag(sync=True)  # pinned query index or None
    selected_key = traitlets.Int(None, allow_none=True).tag(sync=True)  # pinned key index or None
    view = traitlets.Unicode("map").tag(sync=True)  # "map" | "lines" (at most LINES_MAX_TOKENS a side)
    # Big explorers (more than EAGER_MAX_BYTES of float32): _weights and _mask stay empty; the page gets
    # _thumbs (max-|value| blocks of every map for the grid) and the exact map on display as _exact
    # (float32, NaN = masked) for map _exact_at = [layer, head], re-sent whenever layer or head changes.
    _lazy = traitlets.Bool(False).tag(sync=True)
    _thumbs = traitlets.Bytes(b"").tag(sync=True)  # float32 (layers, heads, min(56, Lq), min(56, Lk))
    _exact = traitlets.Bytes(b"").tag(sync=True)
    _exact_at = traitlets.List(traitlets.Int(), [0, 0]).tag(sync=True)

    def _setup(self, w: np.ndarray, query_tokens: Any, key_tokens: Any, raw_scores: bool, cmap: str | None,
               tol: float, mask: Any, scale: Any) -> dict:
        """Check tokens, values, mask and scale of ``w (layers, heads, Lq, Lk)``; the synced traits as a dict."""
        q = _token_list(query_tokens, "query_tokens")
        k = q if key_tokens is None else _token_list(key_tokens, "key_tokens")
        shape, (Lq, Lk) = tuple(w.shape if self._kind == "explorer" else w.shape[2:]), w.shape[2:]
        if len(q) != Lq:
            raise ValueError(f"query_tokens has {len(q)} tokens but weights has shape {shape}, i.e. {Lq} query rows")
        if len(k) != Lk:
            which = "key_tokens" if key_tokens is not None else "key_tokens=None (self-attention: keys = query_tokens), so it"
            raise ValueError(f"{which} has {len(k)} tokens but weights has shape {shape}, i.e. {Lk} key columns"
                             + ("; pass key_tokens for cross-attention" if key_tokens is None else ""))
        _check_values(w if self._kind == "explorer" else w[0, 0], raw_scores, tol)
        allowed = np.ones(w.shape, bool)                                            # (layers, heads, Lq, Lk)
        if mask is not None:
            allowed = _mask_array(mask, shape).reshape(w.shape) if self._kind == "explorer" else \
                _mask_array(mask, shape)[None, None]
            if not raw_scores and (np.abs(w[~allowed]) > 1e-6).any():
                first = tuple(int(i) for i in np.argwhere(~allowed & (np.abs(w) > 1e-6))[0])
                raise ValueError(f"mask says the cell at {_where(first[4 - len(shape):], len(shape))} may not attend, "
                                 f"but its weight is {w[first]:.4g}, not 0; is the mask inverted (True = may attend)?")
        if raw_scores:
            allowed = allowed & (w > FILL_BELOW)
        flat = np.where(allowed, w, np.nan).reshape(w.shape[0] * w.shape[1], -1)  # (maps, Lq * Lk)
        empty = np.isnan(flat).all(axis=1)
        lo = np.where(empty, 0.0, np.nanmin(np.where(empty[:, None], 0.0, flat), axis=1))
        hi = np.where(empty, 0.0, np.nanmax(np.where(empty[:, None], 0.0, flat), axis=1))
        if cmap is None:
            cmap = "RdBu_r" if raw_scores else "viridis"
        self._palette_lut = _colormap_lut(cmap)
        scale_name, vmin, vmax = _parse_scale(scale)
        lazy = self._kind == "explorer" and w.size * 4 > EAGER_MAX_BYTES
        self._full = np.where(allowed, w, np.nan).astype("<f4") if lazy else None  # (layers, heads, Lq, Lk), NaN = masked
        self._full_raw = w.astype("<f4") if lazy else None
        extra = dict(_lazy=True, _thumbs=_thumbnails(self._full).tobytes(),
                     _exact=self._full[0, 0].tobytes(), _exact_at=[0, 0]) if lazy else {}
        return dict(_weights=b"" if lazy else w.astype("<f4").tobytes(), _shape=list(w.shape),
                    _palette=self._palette_lut.tobytes(), **extra,
                    _mask=b"" if allowed.all() or lazy else allowed.astype(np.uint8).tobytes(),
                    _map_lo=lo.tolist(), _map_hi=hi.tolist(), _mask_rgb=_mask_colour(self._palette_lut),
                    _query_tokens=q, _key_tokens=k, raw_scores=bool(raw_scores), scale=scale_name, vmin=vmin, vmax=vmax)

    @property
    def weights(self) -> np.ndarray:
        """The float32 weights the browser shows: ``(Lq, Lk)`` or ``(layers, heads, Lq, Lk)``."""
        w = self._full_raw if self._lazy else np.frombuffer(self._weights, dtype="<f4").reshape(self._shape)
        return w[0, 0] if self._kind == "heatmap" else w

    @property
    def mask(self) -> np.ndarray:
        """Which cells are drawn as values (True) rather than as masked, shaped like ``weights``."""
        if self._lazy:
            m = ~np.isnan(self._full)
        else:
            m = np.ones(self._shape, bool) if not self._mask else np.frombuffer(self._mask, np.uint8).reshape(self._shape) > 0
        return m[0, 0] if self._kind == "heatmap" else m

    def _quantised(self) -> bytes:
        """Every map in 8 bits for a kernel-free page: 0..254 from the map's smallest to largest value, 255 = masked."""
        L, H = self._shape[:2]
        lo = np.asarray(self._map_lo, np.float32).reshape(L, H, 1, 1)
        span = np.maximum(np.asarray(self._map_hi, np.float32).reshape(L, H, 1, 1) - lo, np.float32(1e-30))
        q = np.round((np.nan_to_num(self._full) - lo) / span * 254)
        return np.where(np.isnan(self._full), 255, np.clip(q, 0, 254)).astype(np.uint8).tobytes()

    def _export_nbytes(self) -> int:
        """Bytes of map data an export of this widget carries (float32, or 8 bits a cell when lazy)."""
        return int(np.prod(self._shape)) if self._lazy else len(self._weights)

    @property
    def query_tokens(self) -> list[str]:
        return list(self._query_tokens)

    @property
    def key_tokens(self) -> list[str]:
        return list(self._key_tokens)

    def _range(self, layer: int, head: int) -> tuple[float, float]:
        """The colour range of map (layer, head) on the current scale (the browser computes the same)."""
        if self.scale == "fixed":
            return float(self.vmin), float(self.vmax)
        L, H = self._shape[:2]
        idx = {"map": [layer * H + head], "layer": range(layer * H, (layer + 1) * H), "model": range(L * H)}[self.scale]
        lo, hi = min(self._map_lo[i] for i in idx), max(self._map_hi[i] for i in idx)
        if self.raw_scores:
            lim = max(abs(lo), abs(hi)) or 1.0
            return -lim, lim
        return 0.0, hi if hi > 0 else 1.0

    def _display_array(self) -> np.ndarray:
        """``(layers, heads, Lq, Lk)`` float64 with NaN where a cell is masked."""
        if self._lazy:
            return self._full.astype(np.float64)
        w = np.frombuffer(self._weights, dtype="<f4").reshape(self._shape).astype(np.float64)
        if self._mask:
            w[np.frombuffer(self._mask, np.uint8).reshape(self._shape) == 0] = np.nan
        return w

    @traitlets.validate("selected")
    def _check_selected(self, proposal: dict) -> int | None:
        i = proposal["value"]
        if i is not None and not 0 <= i < self._shape[2]:
            raise _OutOfRange(f"selected must be None or a query index in [0, {self._shape[2] - 1}], got {i}")
        return i

    @traitlets.validate("selected_key")
    def _check_selected_key(self, proposal: dict) -> int | None:
        j = proposal["value"]
        if j is not None and not 0 <= j < self._shape[3]:
            raise _OutOfRange(f"selected_key must be None or a key index in [0, {self._shape[3] - 1}], got {j}")
        return j

    @traitlets.validate("view")
    def _check_view(self, proposal: dict) -> str:
        v = proposal["value"]
        if v not in VIEWS:
            raise _OutOfRange(f"view must be one of {VIEWS}, got {v!r}")
        Lq, Lk = self._shape[2:]
        if v == "lines" and max(Lq, Lk) > LINES_MAX_TOKENS:
            raise _OutOfRange(f"view='lines' draws a line per query-key pair and needs at most {LINES_MAX_TOKENS} "
                              f"tokens a side, but the maps are {Lq} x {Lk} query x key tokens; use view='map'")
        return v

    @traitlets.validate("scale")
    def _check_scale(self, proposal: dict) -> str:
        s = proposal["value"]
        if s not in SCALES + ("fixed",):
            raise _OutOfRange(f"scale must be one of {SCALES + ('fixed',)}, got {s!r}; "
                              "for a fixed range use set_scale((vmin, vmax))")
        if s == "fixed" and (self.vmin is None or self.vmax is None):
            raise _OutOfRange("scale='fixed' needs vmin and vmax; use set_scale((vmin, vmax))")
        return s

    @traitlets.validate("vmin", "vmax")
    def _check_limits(self, proposal: dict) -> float | None:
        """Finite, and vmin < vmax when both are set (checked once both have changed, e.g. in set_scale)."""
        name, v = proposal["trait"].name, proposal["value"]
        if v is None:
            return v
        if not np.isfinite(v):
            raise _OutOfRange(f"{name} must be a finite number or None, got {v}")
        lo, hi = (v, self.vmax) if name == "vmin" else (self.vmin, v)
        if lo is not None and hi is not None and not lo < hi:
            raise _OutOfRange(f"vmin must be below vmax, got vmin={lo} and vmax={hi}")
        return v

    def set_scale(self, scale: str | tuple[float, float]) -> None:
        """Switch the colour scale: ``"layer"``, ``"map"``, ``"model"`` or a fixed ``(vmin, vmax)``."""
        name, lo, hi = _parse_scale(scale)
        with self.hold_sync(), self.hold_trait_notifications():  # vmin and vmax are checked together
            if name == "fixed":
                self.vmin, self.vmax = lo, hi
            self.scale = name

    def to_html(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write this widget as one self-contained HTML page (data, script, styles inline; no network)."""
        from .widget_render import export_html

        return export_html(self, path)

    def _current(self) -> tuple[np.ndarray, str]:
        """The map on display ``(Lq, Lk)`` and its caption; each widget defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define _current()")

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        from .widget_render import PAYLOAD_MAX_BYTES, export_state, static_html, static_png

        data, metadata = bundle
        png = static_png(self)
        data["image/png"] = png
        data["text/html"] = static_html(self, png, self._current()[1])
        if self._export_nbytes() <= PAYLOAD_MAX_BYTES:  # for the static site (tools/build_site.py): a live page
            data[EXPORT_MIME] = export_state(self)
        return data, metadata


class AttentionHeatmap(_AttentionWidget):
    """One attention map ``weights (Lq, Lk)`` (rows = queries, columns = keys), interactive.

    Args:
        weights: 2-D torch tensor or NumPy array ``(Lq, Lk)``; rows sum to 1 (or are all
            zero) unless ``raw_scores=True``.
        query_tokens: ``Lq`` labels of the rows.
        key_tokens: ``Lk`` labels of the columns; None means keys = queries (self-attention).
        title: shown above the map.
        raw_scores: allow unnormalised scores (any finite values; a diverging palette centred on 0).
        cmap: a matplotlib colormap name (default "viridis", or "RdBu_r" for raw scores).
        selected: a query index to pin at start, or None.
        mask: bool ``(Lq, Lk)``, True = may attend; False cells are drawn in the mask colour.
        scale: "layer" (the default; for one map the same as "map"), "map", "model", or (vmin, vmax).
        selected_key: a key index to pin at start ("who attends here"), or None.
        view: "map" (the matrix) or "lines" (at most LINES_MAX_TOKENS tokens a side).

    Synced traitlets: ``selected``, ``selected_key`` (int or None), ``scale`` (with ``vmin``,
    ``vmax``), ``view`` ("map" or "lines"), readable, settable and observable from Python; ``set_scale`` switches the scale.
    """

    def __init__(self, weights: torch.Tensor | np.ndarray, query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, title: str = "", raw_scores: bool = False,
                 cmap: str | None = None, selected: int | None = None, mask: Any = None,
                 scale: str | tuple[float, float] = "layer", selected_key: int | None = None, view: str = "map",
                 **kwargs: Any) -> None:
        w = _to_numpy(weights, "weights")
        if w.ndim != 2:
            hint = "; pick one map, e.g. weights[layer, head] or weights[0, head]" if w.ndim > 2 else ""
            raise ValueError(f"weights must be 2-D (Lq, Lk), got shape {tuple(w.shape)} ({w.ndim}-D){hint}"
                             + ("; AttentionExplorer shows every head" if w.ndim > 2 else ""))
        traits = self._setup(w[None, None], query_tokens, key_tokens, raw_scores, cmap, _row_tolerance(weights),
                             mask, scale)
        super().__init__(**traits, title=title, selected=selected, selected_key=selected_key, view=view, **kwargs)

    def _current(self) -> tuple[np.ndarray, str]:
        Lq, Lk = self._shape[2:]
        return self.weights.astype(np.float64), f"{self.title + ': ' if self.title else ''}{Lq} x {Lk} query x key tokens"

    def __repr__(self) -> str:
        Lq, Lk = self._shape[2:]
        return f"AttentionHeatmap({Lq} x {Lk} query x key tokens, selected={self.selected})"


class AttentionExplorer(_AttentionWidget):
    """Every head of every layer: ``weights (layers, heads, Lq, Lk)``, with selectors.

    Args:
        weights: 4-D tensor/array ``(layers, heads, Lq, Lk)``, or a list of per-layer
            ``(heads, Lq, Lk)`` tensors (as collected from a model, batch squeezed).
        query_tokens, key_tokens, title, raw_scores, cmap, selected, selected_key, view: as in AttentionHeatmap.
        mask: bool, True = may attend: ``(Lq, Lk)`` or ``(layers, heads, Lq, Lk)`` (size-1 dims broadcast).
        scale: "layer" (default: the heads of a layer share one colour scale), "map", "model", or (vmin, vmax).
        layer_names: one name per layer (default "layer 0", "layer 1", ...).
        layer, head: the map shown first.

    Synced traitlets: ``layer``, ``head``, ``selected``, ``selected_key``, ``scale``, ``view``;
    out-of-range values raise ValueError.
    """

    _kind = traitlets.Unicode("explorer").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)

    def __init__(self, weights: torch.Tensor | np.ndarray | Sequence[torch.Tensor], query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, layer_names: Sequence[str] | None = None, title: str = "",
                 raw_scores: bool = False, cmap: str | None = None, layer: int = 0, head: int = 0,
                 selected: int | None = None, mask: Any = None, scale: str | tuple[float, float] = "layer",
                 selected_key: int | None = None, view: str = "map", **kwargs: Any) -> None:
        if isinstance(weights, (list, tuple)):
            per_layer = [_to_numpy(x, f"weights[{i}]") for i, x in enumerate(weights)]
            if not per_layer:
                raise ValueError("weights is an empty list; expected one (heads, Lq, Lk) tensor per layer")
            for i, x in enumerate(per_layer):
                if x.ndim != 3 or x.shape != per_layer[0].shape:
                    hint = "; squeeze the batch: [a[0] for a in weights]" if x.ndim == 4 and x.shape[0] == 1 else ""
                    raise ValueError(f"weights[{i}] has shape {tuple(x.shape)} but every layer must be 3-D "
                                     f"(heads, Lq, Lk) like weights[0] {tuple(per_layer[0].shape)}{hint}")
            w = np.stack(per_layer)
        else:
            w = _to_numpy(weights, "weights")
        if w.ndim != 4:
            hint = {2: "; for one map use AttentionHeatmap", 3: "; for one layer pass weights[None]",
                    5: "; squeeze the batch of one: weights[0]"}.get(w.ndim, "")
            raise ValueError(f"weights must be 4-D (layers, heads, Lq, Lk), got shape {tuple(w.shape)} ({w.ndim}-D){hint}")
        if 0 in w.shape[:2]:
            raise ValueError(f"weights must hold at least one layer and one head, got shape {tuple(w.shape)}")
        names = [f"layer {i}" for i in range(w.shape[0])] if layer_names is None else [str(n) for n in layer_names]
        if len(names) != w.shape[0]:
            raise ValueError(f"layer_names has {len(names)} names but weights has shape {tuple(w.shape)}, "
                             f"i.e. {w.shape[0]} layers")
        tol = _row_tolerance(weights[0] if isinstance(weights, (list, tuple)) else weights)
        traits = self._setup(w, query_tokens, key_tokens, raw_scores, cmap, tol, mask, scale)
        super().__init__(**traits, _layer_names=names, title=title, layer=layer, head=head, selected=selected,
                         selected_key=selected_key, view=view, **kwargs)

    @traitlets.validate("layer", "head")
    def _check_layer_head(self, proposal: dict) -> int:
        name, value = proposal["trait"].name, proposal["value"]
        n = self._shape[0] if name == "layer" else self._shape[1]
        if not 0 <= value < n:
            raise _OutOfRange(f"{name} must be in [0, {n - 1}] (weights has shape {tuple(self._shape)}), got {value}")
        return value

    @traitlets.observe("layer", "head")
    def _send_current(self, change: dict) -> None:
        """Big explorer: send the exact map now on display (the page asked for it by setting layer/head)."""
        if self._lazy and [self.layer, self.head] != list(self._exact_at):
            with self.hold_sync():
                self._exact = self._full[self.layer, self.head].tobytes()
                self._exact_at = [self.layer, self.head]

    def _current(self) -> tuple[np.ndarray, str]:
        Lq, Lk = self._shape[2:]
        caption = (f"{self.title + ': ' if self.title else ''}{self._layer_names[self.layer]}, head {self.head} "
                   f"({self._shape[0]} layers x {self._shape[1]} heads, {Lq} x {Lk} query x key tokens)")
        return self.weights[self.layer, self.head].astype(np.float64), caption

    def __repr__(self) -> str:
        L, H, Lq, Lk = self._shape
        return (f"AttentionExplorer({L} layers x {H} heads, {Lq} x {Lk} query x key tokens, "
                f"layer={self.layer}, head={self.head}, selected={self.selected})")
