"""Interactive attention maps for notebooks: hover a query token to see where it looks.

Two anywidget widgets (JupyterLab 4, Notebook 7, VS Code). The browser code is the bundled
ES module ``static/attention.js`` (plus ``static/attention.css``): nothing from a CDN, no
build step. Hovering is handled in the browser (no kernel round trip); clicking pins a query
token, clicking it again unpins, and the pinned index is the synced traitlet ``selected``.

* ``AttentionHeatmap(weights (Lq, Lk), query_tokens, key_tokens=None)``: one map.
* ``AttentionExplorer(weights (layers, heads, Lq, Lk), query_tokens, key_tokens=None)``:
  layer and head selectors (synced ``layer``, ``head``), an overview of every head of
  the current layer (click a thumbnail to open that head), and the same hover and pin.
  Also accepts a list of per-layer ``(heads, Lq, Lk)`` tensors; squeeze a batch of one
  yourself (``weights[0]``).

Rows are queries, columns are keys. ``key_tokens=None`` means self-attention (keys =
queries); for cross-attention pass the target tokens as ``query_tokens`` and the source
tokens as ``key_tokens``. Weights must be finite (fill masked scores with a finite number).
Without ``raw_scores=True`` they must also be >= 0 and every row must sum to 1 (within
1e-3; bfloat16 input within its epsilon, 0.0078) or be all zeros: an all-zero row is
allowed for a query that was masked out entirely (e.g. padding). Colours go from 0 to the
largest weight of the map shown (raw scores: from its smallest to its largest value).
Up to 512 tokens a cell is at least one pixel; longer maps are shrunk, so point at their
rows through the token strips.

Where widgets cannot run (GitHub, an untrusted notebook in JupyterLab, nbconvert HTML of
a notebook saved without widget state) the output shows a small static ``text/html``
preview (a table up to 24 tokens, else a PNG of at most 256 x 256 pixels). It holds no
ids or addresses, so nbval can compare it; ``text/plain`` is a stable repr such as
``AttentionHeatmap(12 x 12 query x key tokens, selected=None)``.

Stable ``data-testid`` attributes of the view (for tests and for notebook authors):
``attn-root`` (with ``data-kind``, ``data-active-row``, ``data-hover-row``,
``data-selected``, ``data-layer``, ``data-head``, ``data-render-ms``), ``title``,
``query-tokens`` / ``query-token-{i}``, ``key-tokens`` / ``key-token-{j}`` (with
``data-weight`` and a ``title`` tooltip such as ``it → animal: 0.412`` while a row is
highlighted), ``readout``, ``heatmap-canvas``, ``heatmap-overlay``, ``legend``,
``pinned-marker`` (hidden when nothing is pinned; click to unpin); explorer only:
``layer-select``, ``head-select``, ``head-overview``, ``head-thumb-{h}``.
"""
from __future__ import annotations

import base64
import html
import pathlib
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import anywidget
import numpy as np
import torch
import traitlets

from .plotting import _to_numpy

__all__ = ["AttentionHeatmap", "AttentionExplorer"]

_STATIC = pathlib.Path(__file__).parent / "static"
ROW_SUM_TOL = 1e-3  # |row sum - 1| allowed for softmax weights (half precision: its epsilon, if larger)


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


def _png(index: np.ndarray, palette: np.ndarray) -> bytes:
    """A palette PNG of a (H, W) uint8 colour-index image."""
    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + r.tobytes() for r in index)
    header = struct.pack(">IIBBBBB", index.shape[1], index.shape[0], 8, 3, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"PLTE", palette.tobytes())
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def _static_html(w: np.ndarray, q: list[str], k: list[str], palette: np.ndarray, raw: bool, caption: str) -> str:
    """A small self-contained HTML preview of one map ``w (Lq, Lk)``: a table up to 24 x 24
    tokens, else a PNG of at most 256 x 256 pixels (block-averaged), so it stays small."""
    lo = float(w.min()) if raw else 0.0
    hi = max(float(w.max()), lo + 1e-12)
    index = np.clip(np.round((w - lo) / (hi - lo) * 255), 0, 255).astype(np.uint8)
    esc = html.escape
    note = (f"<div style='font-size:12px'>{esc(caption)}; colour {lo:.3f} to {hi:.3f}. Static preview: "
            "run the notebook with a live kernel to hover and click.</div>")
    Lq, Lk = w.shape
    if max(Lq, Lk) <= 24:
        hexes = ["#%02x%02x%02x" % tuple(c) for c in palette]
        head = "".join(f"<th style='font-weight:normal;font-size:11px'>{esc(t)}</th>" for t in k)
        rows = "".join(
            f"<tr><th style='font-weight:normal;font-size:11px;text-align:right'>{esc(q[i])}</th>"
            + "".join(f"<td title='{esc(q[i])} → {esc(k[j])}: {w[i, j]:.3f}' style='background:{hexes[index[i, j]]};"
                      "width:16px;height:16px;padding:0'></td>" for j in range(Lk)) + "</tr>"
            for i in range(Lq))
        return f"<div>{note}<table style='border-collapse:collapse'><tr><th></th>{head}</tr>{rows}</table></div>"
    step = int(np.ceil(max(Lq, Lk) / 256))  # block-average big maps down to <= 256 pixels a side
    pad = np.pad(w, ((0, -Lq % step), (0, -Lk % step)), mode="edge")
    small = pad.reshape(pad.shape[0] // step, step, pad.shape[1] // step, step).mean(axis=(1, 3))
    small_index = np.clip(np.round((small - lo) / (hi - lo) * 255), 0, 255).astype(np.uint8)
    scale = max(1, 256 // max(small.shape))
    png = _png(np.kron(small_index, np.ones((scale, scale), np.uint8)), palette)
    return (f"<div>{note}<img alt='{esc(caption)}' width='{small.shape[1] * scale}' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode()}'></div>")


class _AttentionWidget(anywidget.AnyWidget):
    """Shared traits, checks and reprs of the two widgets (the JS side is one module)."""

    _esm = _STATIC / "attention.js"
    _css = _STATIC / "attention.css"
    _kind = traitlets.Unicode("heatmap").tag(sync=True)
    _weights = traitlets.Bytes(b"").tag(sync=True)  # float32 little-endian, C order, shape _shape
    _shape = traitlets.List(traitlets.Int(), [1, 1, 1, 1]).tag(sync=True)  # [layers, heads, Lq, Lk]
    _palette = traitlets.Bytes(b"").tag(sync=True)  # 256 x RGB
    _query_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _key_tokens = traitlets.List(traitlets.Unicode()).tag(sync=True)
    _layer_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    raw_scores = traitlets.Bool(False).tag(sync=True)
    selected = traitlets.Int(None, allow_none=True).tag(sync=True)  # pinned query index or None

    def _setup(self, w: np.ndarray, query_tokens: Any, key_tokens: Any, raw_scores: bool, cmap: str,
               tol: float) -> dict:
        """Check tokens and values of ``w (layers, heads, Lq, Lk)``; the synced traits as a dict."""
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
        self._palette_lut = _colormap_lut(cmap)
        return dict(_weights=w.astype("<f4").tobytes(), _shape=list(w.shape), _palette=self._palette_lut.tobytes(),
                    _query_tokens=q, _key_tokens=k, raw_scores=bool(raw_scores))

    @property
    def weights(self) -> np.ndarray:
        """The float32 weights as sent to the browser: ``(Lq, Lk)`` or ``(layers, heads, Lq, Lk)``."""
        w = np.frombuffer(self._weights, dtype="<f4").reshape(self._shape)
        return w[0, 0] if self._kind == "heatmap" else w

    @property
    def query_tokens(self) -> list[str]:
        return list(self._query_tokens)

    @property
    def key_tokens(self) -> list[str]:
        return list(self._key_tokens)

    @traitlets.validate("selected")
    def _check_selected(self, proposal: dict) -> int | None:
        i = proposal["value"]
        if i is not None and not 0 <= i < self._shape[2]:
            raise _OutOfRange(f"selected must be None or a query index in [0, {self._shape[2] - 1}], got {i}")
        return i

    def _current(self) -> tuple[np.ndarray, str]:
        """The map on display ``(Lq, Lk)`` and its caption, for the static preview; each widget defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define _current()")

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        w, caption = self._current()
        data["text/html"] = _static_html(w, self._query_tokens, self._key_tokens, self._palette_lut,
                                        self.raw_scores, caption)
        return data, metadata


class AttentionHeatmap(_AttentionWidget):
    """One attention map ``weights (Lq, Lk)`` (rows = queries, columns = keys), interactive.

    Args:
        weights: 2-D torch tensor or NumPy array ``(Lq, Lk)``; rows sum to 1 (or are all
            zero) unless ``raw_scores=True``.
        query_tokens: ``Lq`` labels of the rows.
        key_tokens: ``Lk`` labels of the columns; None means keys = queries (self-attention).
        title: shown above the map.
        raw_scores: allow unnormalised scores (any finite values; colours span min..max).
        cmap: a matplotlib colormap name.
        selected: a query index to pin at start, or None.

    Synced traitlet: ``selected`` (int or None), readable, settable and observable from Python.
    """

    def __init__(self, weights: torch.Tensor | np.ndarray, query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, title: str = "", raw_scores: bool = False,
                 cmap: str = "viridis", selected: int | None = None, **kwargs: Any) -> None:
        w = _to_numpy(weights, "weights")
        if w.ndim != 2:
            hint = "; pick one map, e.g. weights[layer, head] or weights[0, head]" if w.ndim > 2 else ""
            raise ValueError(f"weights must be 2-D (Lq, Lk), got shape {tuple(w.shape)} ({w.ndim}-D){hint}"
                             + ("; AttentionExplorer shows every head" if w.ndim > 2 else ""))
        traits = self._setup(w[None, None], query_tokens, key_tokens, raw_scores, cmap, _row_tolerance(weights))
        super().__init__(**traits, title=title, selected=selected, **kwargs)

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
        query_tokens, key_tokens, title, raw_scores, cmap, selected: as in AttentionHeatmap.
        layer_names: one name per layer (default "layer 0", "layer 1", ...).
        layer, head: the map shown first.

    Synced traitlets: ``layer``, ``head``, ``selected``; out-of-range values raise ValueError.
    """

    _kind = traitlets.Unicode("explorer").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)

    def __init__(self, weights: torch.Tensor | np.ndarray | Sequence[torch.Tensor], query_tokens: Sequence[str],
                 key_tokens: Sequence[str] | None = None, layer_names: Sequence[str] | None = None, title: str = "",
                 raw_scores: bool = False, cmap: str = "viridis", layer: int = 0, head: int = 0,
                 selected: int | None = None, **kwargs: Any) -> None:
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
        traits = self._setup(w, query_tokens, key_tokens, raw_scores, cmap, tol)
        super().__init__(**traits, _layer_names=names, title=title, layer=layer, head=head, selected=selected, **kwargs)

    @traitlets.validate("layer", "head")
    def _check_layer_head(self, proposal: dict) -> int:
        name, value = proposal["trait"].name, proposal["value"]
        n = self._shape[0] if name == "layer" else self._shape[1]
        if not 0 <= value < n:
            raise _OutOfRange(f"{name} must be in [0, {n - 1}] (weights has shape {tuple(self._shape)}), got {value}")
        return value

    def _current(self) -> tuple[np.ndarray, str]:
        Lq, Lk = self._shape[2:]
        caption = (f"{self.title + ': ' if self.title else ''}{self._layer_names[self.layer]}, head {self.head} "
                   f"({self._shape[0]} layers x {self._shape[1]} heads, {Lq} x {Lk} query x key tokens)")
        return self.weights[self.layer, self.head].astype(np.float64), caption

    def __repr__(self) -> str:
        L, H, Lq, Lk = self._shape
        return (f"AttentionExplorer({L} layers x {H} heads, {Lq} x {Lk} query x key tokens, "
                f"layer={self.layer}, head={self.head}, selected={self.selected})")
