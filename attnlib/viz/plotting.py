"""Static matplotlib plots: one attention map, a grid of heads, and training curves.

Every function accepts torch tensors (any device, with or without grad) or NumPy arrays,
checks the shapes, and returns the matplotlib object it drew on, so a notebook can add
to it (``ax.set_title(...)``) or save it.

Conventions for attention maps: **rows are queries, columns are keys**, so row i shows
where query i looks; each row of a softmax map sums to 1.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .._checks import to_numpy

__all__ = ["plot_heatmap", "plot_heads", "plot_curves", "plot_history"]


def _tokens(tokens: Any, expected: int, name: str, shape: tuple[int, ...], axis_desc: str) -> list[str] | None:
    """Token labels as strings, checked against the matching dimension of the weights."""
    if tokens is None:
        return None
    if hasattr(tokens, "tolist"):  # a tensor or array of ids
        tokens = tokens.tolist()
    if isinstance(tokens, str):
        raise ValueError(f"{name} must be a sequence of tokens, not a single string {tokens!r}; try {name}=list(...)")
    labels = [str(t) for t in tokens]
    if len(labels) != expected:
        raise ValueError(
            f"{name} has {len(labels)} tokens but weights has shape {shape}, i.e. {expected} {axis_desc}"
        )
    return labels


def plot_heatmap(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    cmap: str = "viridis",
    annotate: bool = False,
    vmin: float | None = 0,
    vmax: float | None = None,
    colorbar: bool = True,
) -> Axes:
    """Draw one attention map ``weights (Lq, Lk)``: rows = queries, columns = keys.

    Args:
        weights: 2-D tensor or array ``(Lq, Lk)``.
        query_tokens: ``Lq`` labels for the rows (or None for indices).
        key_tokens: ``Lk`` labels for the columns (or None for indices).
        ax: the Axes to draw on; a new small figure when None.
        title, cmap: as in matplotlib.
        annotate: write each value (2 decimals) in its cell; for small maps.
        vmin, vmax: the colour range; ``vmax=None`` uses the largest weight.
        colorbar: add a colorbar next to the map.

    Returns:
        The Axes drawn on.
    """
    w = to_numpy(weights, "weights")
    if w.ndim != 2:
        hint = "; pick one map, e.g. weights[0, head]" if w.ndim > 2 else ""
        raise ValueError(f"weights must be 2-D (Lq, Lk), got shape {tuple(w.shape)}{hint}")
    Lq, Lk = w.shape
    q_labels = _tokens(query_tokens, Lq, "query_tokens", tuple(w.shape), "query rows (Lq)")
    k_labels = _tokens(key_tokens, Lk, "key_tokens", tuple(w.shape), "key columns (Lk)")

    if ax is None:
        size = (min(8.0, max(3.5, 0.35 * Lk + 2.0)), min(6.0, max(2.5, 0.35 * Lq + 1.2)))
        _, ax = plt.subplots(figsize=size)
    image = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")

    if k_labels is not None:
        long = max((len(t) for t in k_labels), default=0) > 3
        ax.set_xticks(range(Lk))
        ax.set_xticklabels(k_labels, rotation=90 if long else 0)
    if q_labels is not None:
        ax.set_yticks(range(Lq))
        ax.set_yticklabels(q_labels)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title is not None:
        ax.set_title(title)

    if annotate:
        lo, hi = image.get_clim()
        middle = (lo + hi) / 2
        for i in range(Lq):
            for j in range(Lk):
                colour = "black" if w[i, j] > middle else "white"  # readable on dark and light cells
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7, color=colour)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_heads(
    weights: torch.Tensor | np.ndarray,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ncols: int = 4,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
    share_scale: bool = True,
    cmap: str = "viridis",
) -> Figure:
    """Draw every head of ``weights (h, Lq, Lk)`` in a grid of ``ncols`` columns.

    With ``share_scale=True`` all heads use one colour range (0 to the largest weight of
    any head) and one colorbar, so colours compare across heads; otherwise each head gets
    its own range and colorbar. ``titles`` defaults to "head 0", "head 1", ...

    Returns:
        The Figure.
    """
    w = to_numpy(weights, "weights")
    if w.ndim != 3:
        hint = "; for a batch of maps (B, h, Lq, Lk) pass weights[b]" if w.ndim == 4 else ""
        raise ValueError(f"weights must be 3-D (h, Lq, Lk), got shape {tuple(w.shape)}{hint}")
    h, Lq, Lk = w.shape
    if h < 1:
        raise ValueError(f"weights must hold at least one head, got shape {tuple(w.shape)}")
    if ncols < 1:
        raise ValueError(f"ncols must be a positive int, got {ncols}")
    if titles is None:
        titles = [f"head {i}" for i in range(h)]
    elif len(titles) != h:
        raise ValueError(f"titles has {len(titles)} entries but weights has shape {tuple(w.shape)}, i.e. {h} heads")
    # Check the tokens once here, so the message names the full (h, Lq, Lk) shape.
    _tokens(query_tokens, Lq, "query_tokens", tuple(w.shape), "query rows (Lq)")
    _tokens(key_tokens, Lk, "key_tokens", tuple(w.shape), "key columns (Lk)")

    ncols = min(ncols, h)
    nrows = math.ceil(h / ncols)
    cell = min(2.8, max(1.6, 0.2 * max(Lq, Lk) + 0.9))  # inches per map
    fig, axes = plt.subplots(nrows, ncols, figsize=(cell * ncols + 1.0, cell * nrows + 0.4), squeeze=False,
                             layout="constrained")
    vmax = float(np.nanmax(w)) if share_scale else None
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")  # unused cell of the last row
            continue
        plot_heatmap(w[i], query_tokens, key_tokens, ax=ax, title=titles[i], cmap=cmap,
                     vmin=0, vmax=vmax, colorbar=not share_scale)
        if i + ncols < h:  # the axis name "key" only under the lowest map of each column
            ax.set_xlabel("")
        if i % ncols != 0:  # y labels only on the first column
            ax.set_ylabel("")
            if query_tokens is not None:
                ax.set_yticklabels([])
    if share_scale:
        fig.colorbar(axes.flat[0].images[0], ax=list(axes.flat), shrink=0.8)
    if suptitle is not None:
        fig.suptitle(suptitle)
    return fig


def _as_mapping(obj: Any, name: str) -> Mapping[str, Any]:
    """A dict-like view of a history: a Mapping, or an object with ``as_dict()``/``to_dict()``."""
    if isinstance(obj, Mapping):
        return obj
    for method in ("as_dict", "to_dict"):
        if callable(getattr(obj, method, None)):
            return getattr(obj, method)()
    raise ValueError(f"{name} must be a mapping of metric name -> list of values, got {type(obj).__name__}")


def _is_series(x: Any) -> bool:
    return isinstance(x, (Sequence, np.ndarray, torch.Tensor)) and not isinstance(x, str)


def plot_curves(
    histories: Mapping[str, Any] | Any,
    keys: Sequence[str] | str | None = None,
    ax: Axes | None = None,
    xlabel: str = "epoch",
    title: str | None = None,
) -> Axes:
    """Plot training curves (loss, accuracy, ...) of one run or several runs on one Axes.

    Args:
        histories: either ONE run, a mapping ``metric name -> list of values``
            (e.g. ``{"loss": [...], "acc": [...]}`` or a ``History``), or SEVERAL runs,
            a mapping ``run name -> one run``.
        keys: the metrics to draw (a name or a list); default: every metric.
        ax: the Axes to draw on; a new figure when None.
        xlabel: the x-axis label. If a run has a metric of that name (e.g. "epoch"), its
            values are the x coordinates; otherwise x is 1, 2, 3, ...
        title: optional title.

    Returns:
        The Axes. With several runs, each run has its own colour and each metric its own
        line style; with one run, each metric has its own colour.
    """
    top = _as_mapping(histories, "histories")
    if len(top) == 0:
        raise ValueError("histories is empty; pass {'loss': [...]} or {'run name': {'loss': [...]}}")
    values = list(top.values())
    if all(_is_series(v) for v in values):
        runs = {"": top}  # a single run
    elif not any(_is_series(v) for v in values):
        runs = {str(name): _as_mapping(run, f"histories[{name!r}]") for name, run in top.items()}
    else:
        raise ValueError(
            "histories mixes lists and runs; pass either {'loss': [...]} or {'run name': {'loss': [...]}}"
        )

    if isinstance(keys, str):
        keys = [keys]
    if keys is None:
        keys = list(dict.fromkeys(k for run in runs.values() for k in run if k != xlabel))
    for name, run in runs.items():
        missing = [k for k in keys if k not in run]
        if missing:
            where = f"run {name!r}" if name else "the history"
            raise ValueError(f"{where} has no metric {missing[0]!r}; it has {sorted(run)}")

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    styles = ["-", "--", ":", "-."]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for r, (name, run) in enumerate(runs.items()):
        for s, key in enumerate(keys):
            y = to_numpy(run[key], f"{key} of run {name!r}" if name else key).ravel()
            x = to_numpy(run[xlabel], xlabel).ravel() if xlabel in run else np.arange(1, len(y) + 1)
            if len(x) != len(y):
                raise ValueError(f"{xlabel!r} has {len(x)} values but {key!r} has {len(y)}")
            label = f"{name} {key}".strip() if len(keys) > 1 or not name else name
            style, colour = (styles[s % len(styles)], colours[r % len(colours)]) if name else ("-", colours[s % len(colours)])
            ax.plot(x, y, style, color=colour, label=label)
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs and steps are whole numbers
    if len(keys) == 1:
        ax.set_ylabel(keys[0])
    ax.legend()
    if title is not None:
        ax.set_title(title)
    return ax


def plot_history(history: Any, keys: Sequence[str] | str | None = None, ax: Axes | None = None):
    """Draw a :class:`attnlib.training.History` against its ``epoch`` (or ``step``) entries with :func:`plot_curves`.

    With ``keys`` or ``ax``: those metrics (default: all) on one Axes, which is returned. Without either:
    the losses on the left and the accuracies on the right (panels with no such metric are left out);
    returns the Figure.
    """
    data = _as_mapping(history, "history")
    x = "step" if "step" in data else "epoch"
    if keys is not None or ax is not None:
        keys = [keys] if isinstance(keys, str) else keys
        return plot_curves(data, keys=keys or [k for k in data if k != x], ax=ax, xlabel=x)
    panels = [(title, [k for k in data if word in k]) for title, word in (("loss", "loss"), ("accuracy", "acc"))]
    panels = [(title, names) for title, names in panels if names]
    if not panels:
        raise ValueError(f"no metric named like a loss or an accuracy; logged: {sorted(data)}; pass keys=[...]")
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for a, (title, names) in zip(axes[0], panels):
        plot_curves(data, keys=names, ax=a, title=title, xlabel=x)
    fig.tight_layout()
    return fig
