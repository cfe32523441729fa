"""Interactive attention maps for notebooks: hover a query to see where it looks, a key to see who looks at it.

Two anywidget widgets (JupyterLab 4, Notebook 7, VS Code); built in view in notebook 08. The
browser code is the bundled ES module ``static/attention.js`` (plus ``attention.css``): nothing
from a CDN, no build step, hovering handled in the browser (no kernel round trip).

* ``AttentionHeatmap(weights (Lq, Lk), query_tokens, key_tokens=None)``: one map.
* ``AttentionExplorer(weights (layers, heads, Lq, Lk), query_tokens, key_tokens=None)``: layer
  and head selectors (synced ``layer``, ``head``) and a grid of every layer x head (click a
  thumbnail to open that head). Also accepts a list of per-layer ``(heads, Lq, Lk)`` tensors.
  A tall grid (e.g. SmolLM2's 30 layers x 9 heads) scrolls in a box beside the map, with smaller
  thumbnails and the open head kept in view.

Hover a query token (a label left of the map, a chip, a row) to light its row; hover a key token
to light its column ("who attends here"). Click pins (synced ``selected``, ``selected_key``);
click again or press Escape to unpin; arrow keys move the cursor, Enter pins.

Colour you can trust: ``scale`` is ``"layer"`` (default: one scale shared by the heads of a
layer), ``"map"``, ``"model"``, or a fixed ``(vmin, vmax)`` (``set_scale``); a colour bar with
numbers is always drawn. Weights run from 0 to the top of the group on viridis; raw scores
(``raw_scores=True``) use a diverging palette centred on 0. ``clip_sink=True`` (the page's
"clip the sink" box) sets the top of every scale to the largest weight OUTSIDE each map's sink
column (the key column holding the most weight, e.g. a decoder's first token taking 0.5-0.9 of
every row) and outside rows that ``mask`` lets see one key only (a causal map's first query, whose
weight is 1 in any head): the sink's cells saturate at the top colour and every other cell gets the
colours back. Use it with ``"map"`` to see each head's pattern, with ``"layer"`` to compare heads.
``mask`` (bool, True = may attend) marks masked cells in a colour the palette does not hold;
with raw scores, values <= FILL_BELOW (-1e4, e.g. a -1e9 fill) count as masked too.

Views (synced ``view``): ``"map"``, the matrix, and ``"lines"`` (bertviz's head view), offered up
to LINES_MAX_TOKENS (64) tokens a side. Big explorers (more than EAGER_MAX_BYTES, 16 MB, of float32
maps) send the page grid thumbnails and the map on display; when the page switches layer or head
the kernel sends that map. Where widgets cannot run, the output carries a labelled ``image/png``
(``viz.render``) and a kernel-free export (``viz.export``); ``to_html(path)`` writes one page.

Stable ``data-testid`` attributes of the view: ``attn-root`` (``data-kind``, ``data-active-row``,
``data-hover-row``, ``data-active-col``, ``data-selected``, ``data-selected-key``, ``data-layer``,
``data-head``, ``data-scale``, ``data-clip-sink``, ``data-view``, ``data-loading``, ``data-exact``,
``data-render-ms``), ``title``, ``query-tokens`` / ``query-token-{i}``, ``key-tokens`` /
``key-token-{j}`` (``data-weight``), ``readout``, ``heatmap-canvas``, ``heatmap-overlay``, ``legend``,
``colorbar`` (``data-vmin``, ``data-vmax``), ``pinned-marker``, ``view-select``, ``sink-toggle``,
``lines-view``, ``lines-canvas``, ``lines-query-{i}``, ``lines-key-{j}``; explorer only:
``layer-select``, ``head-select``, ``scale-select``, ``head-grid``, ``thumb-{l}-{h}``.
"""
from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import anywidget
import numpy as np
import torch
import traitlets

from .._checks import to_numpy
from .export import CSS, ESM, EXPORT_MIME, PAYLOAD_MAX_BYTES, export_html, export_nbytes, export_state
from .inputs import FILL_BELOW, ROW_SUM_TOL, build_state, parse_scale, row_tolerance, stack_layers
from .state import EAGER_MAX_BYTES, LINES_MAX_TOKENS, SCALES, VIEWS, AttentionState, page_model

__all__ = ["AttentionHeatmap", "AttentionExplorer", "EAGER_MAX_BYTES", "EXPORT_MIME", "FILL_BELOW",
           "LINES_MAX_TOKENS", "ROW_SUM_TOL"]


class _OutOfRange(ValueError, traitlets.TraitError):
    """A bad ``selected``/``layer``/``head``: a ValueError that traitlets also rolls back."""


class _AttentionWidget(anywidget.AnyWidget):
    """Shared traits, checks and reprs of the two widgets; the data lives in ``self._data`` (an AttentionState)."""

    _esm, _css = ESM, CSS
    # What attention.js reads: made by state.page_model (see there); a big explorer's _weights and _mask
    # stay empty and it gets _thumbs and the exact map _exact of _exact_at = [layer, head] instead.
    _kind = traitlets.Unicode("heatmap").tag(sync=True)
    _constants = traitlets.Dict().tag(sync=True)
    _weights = traitlets.Bytes(b"").tag(sync=True)
    _mask = traitlets.Bytes(b"").tag(sync=True)
    _shape = traitlets.List(traitlets.Int(), [1, 1, 1, 1]).tag(sync=True)
    _map_lo = traitlets.List(traitlets.Float()).tag(sync=True)
    _map_hi = traitlets.List(traitlets.Float()).tag(sync=True)
    _map_rest = traitlets.List(traitlets.Float()).tag(sync=True)
    _palette = traitlets.Bytes(b"").tag(sync=True)
    _mask_rgb = traitlets.List(traitlets.Int()).tag(sync=True)
    _query_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _key_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _layer_names = traitlets.List(traitlets.Unicode(), ["layer 0"]).tag(sync=True)
    _lazy = traitlets.Bool(False).tag(sync=True)
    _thumbs = traitlets.Bytes(b"").tag(sync=True)
    _exact = traitlets.Bytes(b"").tag(sync=True)
    _exact_at = traitlets.List(traitlets.Int(), [0, 0]).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    raw_scores = traitlets.Bool(False).tag(sync=True)
    scale = traitlets.Unicode("layer").tag(sync=True)  # "layer" | "map" | "model" | "fixed" (then vmin, vmax)
    vmin = traitlets.Float(None, allow_none=True).tag(sync=True)
    vmax = traitlets.Float(None, allow_none=True).tag(sync=True)
    clip_sink = traitlets.Bool(False).tag(sync=True)  # the top of the scale leaves out each map's sink column
    selected = traitlets.Int(None, allow_none=True).tag(sync=True)  # pinned query index or None
    selected_key = traitlets.Int(None, allow_none=True).tag(sync=True)  # pinned key index or None
    view = traitlets.Unicode("map").tag(sync=True)  # "map" | "lines" (at most LINES_MAX_TOKENS a side)

    def _start(self, data: AttentionState, **live: Any) -> None:
        """Keep the checked ``data`` and start the widget: its synced traits, then what is on display."""
        self._data = data
        super().__init__(**(page_model(data, kernel=True) | live))

    @property
    def state(self) -> AttentionState:
        """This widget as it is now (data, colours, scale, selection, layer and head) in one object."""
        return dataclasses.replace(
            self._data, title=self.title, scale=self.scale, vmin=self.vmin, vmax=self.vmax, clip_sink=self.clip_sink,
            selected=self.selected, selected_key=self.selected_key, view=self.view,
            layer=getattr(self, "layer", 0), head=getattr(self, "head", 0), map_lo=np.asarray(self._map_lo),
            map_hi=np.asarray(self._map_hi), map_rest=np.asarray(self._map_rest))

    @property
    def weights(self) -> np.ndarray:
        """The float32 weights the browser shows: ``(Lq, Lk)`` or ``(layers, heads, Lq, Lk)``."""
        return self._data.weights[0, 0] if self._kind == "heatmap" else self._data.weights

    @property
    def mask(self) -> np.ndarray:
        """Which cells are drawn as values (True) rather than as masked, shaped like ``weights``."""
        return self._data.mask[0, 0] if self._kind == "heatmap" else self._data.mask

    @property
    def query_tokens(self) -> list[str]:
        return list(self._data.query_tokens)

    @property
    def key_tokens(self) -> list[str]:
        return list(self._data.key_tokens)

    @traitlets.validate("selected", "selected_key")
    def _check_pin(self, proposal: dict) -> int | None:
        name, i = proposal["trait"].name, proposal["value"]
        n, what = (self._shape[2], "query") if name == "selected" else (self._shape[3], "key")
        if i is not None and not 0 <= i < n:
            raise _OutOfRange(f"{name} must be None or a {what} index in [0, {n - 1}], got {i}")
        return i

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
        name, lo, hi = parse_scale(scale)
        with self.hold_sync(), self.hold_trait_notifications():  # vmin and vmax are checked together
            if name == "fixed":
                self.vmin, self.vmax = lo, hi
            self.scale = name

    def to_html(self, path: str | pathlib.Path) -> pathlib.Path:
        """Write this widget as one self-contained HTML page (data, script, styles inline; no network)."""
        return export_html(self.state, path)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        from .render import static_html, static_png

        data, metadata = bundle
        state = self.state
        data["image/png"] = static_png(state)
        data["text/html"] = static_html(data["image/png"], state.caption())
        if export_nbytes(state) <= PAYLOAD_MAX_BYTES:  # for the static site (tools/build_site.py): a live page
            data[EXPORT_MIME] = export_state(state)
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
        clip_sink: the top of the scale leaves out the sink column (see the module's docstring).

    Synced traitlets: ``selected``, ``selected_key`` (int or None), ``scale`` (with ``vmin``,
    ``vmax``), ``clip_sink``, ``view``, readable, settable and observable from Python.
    """

    def __init__(self, weights: torch.Tensor | np.ndarray, query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, title: str = "", raw_scores: bool = False,
                 cmap: str | None = None, selected: int | None = None, mask: Any = None,
                 scale: str | tuple[float, float] = "layer", selected_key: int | None = None, view: str = "map",
                 clip_sink: bool = False, **kwargs: Any) -> None:
        w = to_numpy(weights, "weights")
        if w.ndim != 2:
            hint = "; pick one map, e.g. weights[layer, head] or weights[0, head]" if w.ndim > 2 else ""
            raise ValueError(f"weights must be 2-D (Lq, Lk), got shape {tuple(w.shape)} ({w.ndim}-D){hint}"
                             + ("; AttentionExplorer shows every head" if w.ndim > 2 else ""))
        data = build_state("heatmap", w[None, None], query_tokens, key_tokens, None, raw_scores, cmap,
                           row_tolerance(weights), mask, scale)                           # (1, 1, Lq, Lk)
        self._start(data, title=title, selected=selected, selected_key=selected_key, view=view, clip_sink=clip_sink,
                    **kwargs)

    def __repr__(self) -> str:
        Lq, Lk = self._shape[2:]
        return f"AttentionHeatmap({Lq} x {Lk} query x key tokens, selected={self.selected})"


class AttentionExplorer(_AttentionWidget):
    """Every head of every layer: ``weights (layers, heads, Lq, Lk)``, with selectors.

    Args:
        weights: 4-D tensor/array ``(layers, heads, Lq, Lk)``, or a list of per-layer
            ``(heads, Lq, Lk)`` tensors (as collected from a model, batch squeezed).
        query_tokens, key_tokens, title, raw_scores, cmap, selected, selected_key, view, clip_sink:
            as in AttentionHeatmap.
        mask: bool, True = may attend: ``(Lq, Lk)`` or ``(layers, heads, Lq, Lk)`` (size-1 dims broadcast).
        scale: "layer" (default: the heads of a layer share one colour scale), "map", "model", or (vmin, vmax).
        layer_names: one name per layer (default "layer 0", "layer 1", ...).
        layer, head: the map shown first.

    Synced traitlets: ``layer``, ``head``, ``selected``, ``selected_key``, ``scale``, ``clip_sink``,
    ``view``; out-of-range values raise ValueError.
    """

    _kind = traitlets.Unicode("explorer").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)

    def __init__(self, weights: torch.Tensor | np.ndarray | Sequence[torch.Tensor], query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, layer_names: Sequence[str] | None = None, title: str = "",
                 raw_scores: bool = False, cmap: str | None = None, layer: int = 0, head: int = 0,
                 selected: int | None = None, mask: Any = None, scale: str | tuple[float, float] = "layer",
                 selected_key: int | None = None, view: str = "map", clip_sink: bool = False, **kwargs: Any) -> None:
        w, tol = stack_layers(weights)                                                  # (layers, heads, Lq, Lk)
        data = build_state("explorer", w, query_tokens, key_tokens, layer_names, raw_scores, cmap, tol, mask, scale)
        self._start(data, title=title, layer=layer, head=head, selected=selected, selected_key=selected_key,
                    view=view, clip_sink=clip_sink, **kwargs)

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
                self._exact = self._data.display_map(self.layer, self.head).astype("<f4").tobytes()
                self._exact_at = [self.layer, self.head]

    def __repr__(self) -> str:
        L, H, Lq, Lk = self._shape
        return (f"AttentionExplorer({L} layers x {H} heads, {Lq} x {Lk} query x key tokens, "
                f"layer={self.layer}, head={self.head}, selected={self.selected})")
