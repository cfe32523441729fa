"""The one object between the widgets and everything that draws them: :class:`AttentionState`.

A widget checks its inputs once (``viz.inputs``), keeps them in an ``AttentionState`` and
hands ``widget.state`` (the same data, with the scale, selection, layer and head as they are
now) to the code that draws without a kernel: ``viz.render`` (the labelled PNG) and
``viz.export`` (a self-contained HTML page). :func:`page_model` turns a state into the fields
the browser code ``static/attention.js`` reads; the widget's synced traits and the exported
page are both made by it, so the two cannot drift apart.

Numbers that the browser code and Python must agree on are defined here once and sent to
the page with every widget as ``_constants`` (:data:`PAGE_CONSTANTS`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# ---- shared with the page (sent as the synced trait _constants; attention.js keeps no copy) ----
THUMB = 56  # pixels a side of a grid thumbnail's data: each is the strongest cell of a block of the map
LINES_MAX_TOKENS = 64  # the lines view draws Lq x Lk lines: offered up to this many tokens a side
LEVELS = 256  # colours in a palette; a value maps to 0 .. LEVELS - 1 on the current scale
Q8_TOP, Q8_MASKED = 254, 255  # an 8-bit copy of a map: 0 .. Q8_TOP from its smallest to largest value; Q8_MASKED = masked
LABEL_CHARS = 12  # a token label longer than this is cut to LABEL_CHARS - 1 characters and an ellipsis
SCALES = ("layer", "map", "model")  # and "fixed", set with (vmin, vmax)
VIEWS = ("map", "lines")  # the matrix; or bertviz-style lines between a query column and a key column
PAGE_CONSTANTS = {"thumb": THUMB, "linesMaxTokens": LINES_MAX_TOKENS, "levels": LEVELS, "q8Top": Q8_TOP,
                  "q8Masked": Q8_MASKED, "labelChars": LABEL_CHARS, "scales": [*SCALES, "fixed"], "views": list(VIEWS)}

# ---- Python only ----
EAGER_MAX_BYTES = 16_000_000  # an explorer whose float32 maps exceed this sends them to the page on demand


@dataclass(frozen=True, eq=False)
class AttentionState:
    """What a picture or a page of attention maps needs: the data, its colours, and what is on display.

    Built by the widgets (``widget.state``); read by ``viz.render`` and ``viz.export``. Every map is
    4-D: a single map (AttentionHeatmap) is ``(1, 1, Lq, Lk)``.

    Fields:
        kind: "heatmap" or "explorer".
        weights: ``(layers, heads, Lq, Lk)`` float32, the values as given.
        mask: ``(layers, heads, Lq, Lk)`` bool, True = drawn as a value, False = drawn as masked.
        query_tokens, key_tokens: ``Lq`` and ``Lk`` labels; layer_names: one per layer.
        palette: ``(LEVELS, 3)`` uint8, the colormap; mask_rgb: the colour of masked cells.
        raw_scores: unnormalised scores on a diverging scale centred on 0 (else weights from 0).
        map_lo, map_hi: ``(layers * heads,)`` smallest and largest drawn value of each map (layer-major).
        map_rest: ``(layers * heads,)`` the largest ``|value|`` of each map outside its sink column
            (the key column holding the most weight) and outside rows that may see one key only,
            the top of the scale when ``clip_sink``.
        title, scale ("layer" | "map" | "model" | "fixed"), vmin, vmax (when fixed), clip_sink,
        layer, head (the map on display), selected, selected_key (pinned query / key or None),
        view ("map" | "lines").
    """

    kind: str
    weights: np.ndarray
    mask: np.ndarray
    query_tokens: tuple[str, ...]
    key_tokens: tuple[str, ...]
    layer_names: tuple[str, ...]
    palette: np.ndarray
    mask_rgb: tuple[int, int, int]
    raw_scores: bool
    map_lo: np.ndarray
    map_hi: np.ndarray
    map_rest: np.ndarray
    title: str = ""
    scale: str = "layer"
    vmin: float | None = None
    vmax: float | None = None
    clip_sink: bool = False
    layer: int = 0
    head: int = 0
    selected: int | None = None
    selected_key: int | None = None
    view: str = "map"

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(layers, heads, Lq, Lk)``."""
        return tuple(self.weights.shape)

    @property
    def lazy(self) -> bool:
        """A big explorer: its maps go to a notebook's page on demand (more than EAGER_MAX_BYTES of float32)."""
        return self.kind == "explorer" and self.weights.size * 4 > EAGER_MAX_BYTES

    @property
    def display(self) -> np.ndarray:
        """``(layers, heads, Lq, Lk)`` float32, NaN where a cell is drawn as masked."""
        return np.where(self.mask, self.weights, np.float32(np.nan))

    def display_map(self, layer: int, head: int) -> np.ndarray:
        """One map ``(Lq, Lk)`` float32, NaN where masked."""
        return np.where(self.mask[layer, head], self.weights[layer, head], np.float32(np.nan))

    def range(self, layer: int, head: int) -> tuple[float, float]:
        """The colour range of map (layer, head) on the current scale; attention.js's rangeOf is the same rule."""
        if self.scale == "fixed":
            return float(self.vmin), float(self.vmax)
        L, H = self.shape[:2]
        group = {"map": slice(layer * H + head, layer * H + head + 1), "layer": slice(layer * H, (layer + 1) * H),
                 "model": slice(0, L * H)}[self.scale]
        if self.clip_sink:
            top = float(self.map_rest[group].max()) or 1.0
            return (-top, top) if self.raw_scores else (0.0, top)
        lo, hi = float(self.map_lo[group].min()), float(self.map_hi[group].max())
        if self.raw_scores:
            lim = max(abs(lo), abs(hi)) or 1.0
            return -lim, lim
        return 0.0, hi if hi > 0 else 1.0

    def caption(self) -> str:
        """One line naming what is on display, e.g. ``toy: layer 1, head 2 (2 layers x 4 heads, 11 x 11 ...)``."""
        L, H, Lq, Lk = self.shape
        title = f"{self.title}: " if self.title else ""
        if self.kind == "heatmap":
            return f"{title}{Lq} x {Lk} query x key tokens"
        return (f"{title}{self.layer_names[self.layer]}, head {self.head} "
                f"({L} layers x {H} heads, {Lq} x {Lk} query x key tokens)")


def map_stats(weights: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per map of ``weights (layers, heads, Lq, Lk)``, over the cells ``mask`` draws: the smallest and
    largest value, and the largest ``|value|`` outside the sink column (the column of largest total
    ``|value|``) and outside the rows that may see one key only (the first query of a causal map: its
    weight there is 1 whatever the head does); the whole map's when nothing else is left. Each
    ``(layers * heads,)`` float64."""
    L, H, Lq, Lk = weights.shape
    w, m = weights.reshape(L * H, Lq * Lk), mask.reshape(L * H, Lq * Lk)                # (maps, cells)
    empty = ~m.any(axis=1)
    lo = np.where(empty, 0.0, np.where(m, w, np.inf).min(axis=1))
    hi = np.where(empty, 0.0, np.where(m, w, -np.inf).max(axis=1))
    size = np.where(m, np.abs(w), 0).reshape(L * H, Lq, Lk)                             # (maps, Lq, Lk)
    sink = size.sum(axis=1).argmax(axis=1)                                                # (maps,) key column
    size[np.arange(L * H), :, sink] = 0
    size[m.reshape(L * H, Lq, Lk).sum(axis=2) == 1] = 0                                  # rows with one key allowed
    rest = size.max(axis=(1, 2))
    whole = np.maximum(np.abs(lo), np.abs(hi))
    return lo.astype(float), hi.astype(float), np.where(rest > 0, rest, whole).astype(float)


def thumbnails(display: np.ndarray, side: int = THUMB) -> np.ndarray:
    """``(layers, heads, min(side, Lq), min(side, Lk))`` float32 of ``display (layers, heads, Lq, Lk)``
    (NaN = masked): each pixel the value of largest magnitude in its block of cells (peaks never
    vanish), NaN where the whole block is masked; the blocks attention.js uses."""
    Lq, Lk = display.shape[2:]
    rows = np.arange(min(side, Lq)) * Lq // min(side, Lq)  # block starts, as Math.floor(y * Lq / th) in the page
    cols = np.arange(min(side, Lk)) * Lk // min(side, Lk)
    hi = np.maximum.reduceat(np.maximum.reduceat(np.nan_to_num(display, nan=-np.inf), rows, axis=2), cols, axis=3)
    lo = np.minimum.reduceat(np.minimum.reduceat(np.nan_to_num(display, nan=np.inf), rows, axis=2), cols, axis=3)
    with np.errstate(invalid="ignore"):
        out = np.where(np.abs(hi) >= np.abs(lo), hi, lo)
    return np.where(np.isinf(hi) & np.isinf(lo), np.nan, out).astype("<f4")


def quantised(s: AttentionState) -> bytes:
    """Every map of ``s`` in 8 bits (a kernel-free page of a big explorer): 0 .. Q8_TOP from the map's
    smallest to largest value, Q8_MASKED where masked. ``layers * heads * Lq * Lk`` bytes."""
    L, H = s.shape[:2]
    lo = s.map_lo.astype(np.float32).reshape(L, H, 1, 1)
    span = np.maximum(s.map_hi.astype(np.float32).reshape(L, H, 1, 1) - lo, np.float32(1e-30))
    q = np.round((s.weights - lo) / span * Q8_TOP)
    return np.where(s.mask, np.clip(q, 0, Q8_TOP), Q8_MASKED).astype(np.uint8).tobytes()


def page_model(s: AttentionState, kernel: bool) -> dict:
    """The fields a page's model holds for ``s``: what attention.js reads (bytes stay bytes).

    ``kernel=True``: a notebook's widget, whose synced traits these are; a big explorer (``s.lazy``)
    then carries grid thumbnails and the exact map on display, and the kernel sends another map when
    the page asks. ``kernel=False``: a page with no kernel; a big explorer also carries every map in
    8 bits (``_weights_u8``, see :func:`quantised`).
    """
    L, H, Lq, Lk = s.shape
    out = dict(_kind=s.kind, _shape=[L, H, Lq, Lk], _constants=PAGE_CONSTANTS, _palette=s.palette.tobytes(),
               _mask_rgb=list(s.mask_rgb), _query_tokens=list(s.query_tokens), _key_tokens=list(s.key_tokens),
               _layer_names=list(s.layer_names), _map_lo=s.map_lo.tolist(), _map_hi=s.map_hi.tolist(),
               _map_rest=s.map_rest.tolist(), title=s.title, raw_scores=s.raw_scores, scale=s.scale, vmin=s.vmin,
               vmax=s.vmax, clip_sink=s.clip_sink, selected=s.selected, selected_key=s.selected_key, view=s.view,
               _lazy=s.lazy)
    if s.kind == "explorer":
        out.update(layer=s.layer, head=s.head)
    if not s.lazy:
        return out | dict(_weights=s.weights.astype("<f4").tobytes(),
                          _mask=b"" if s.mask.all() else s.mask.astype(np.uint8).tobytes())
    out.update(_weights=b"", _mask=b"", _thumbs=thumbnails(s.display).tobytes(),
               _exact=s.display_map(s.layer, s.head).astype("<f4").tobytes(), _exact_at=[s.layer, s.head])
    if not kernel:
        out["_weights_u8"] = quantised(s)
    return out
