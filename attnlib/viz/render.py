"""The widgets as pictures, with no kernel and no browser: a labelled PNG of an :class:`AttentionState`.

:func:`static_png` draws what a widget shows (tokens on the axes, a colour bar with numbers,
masked cells in their own colour, the pinned query or key marked; for an explorer, the grid of
every layer and head on the widget's scale). It goes into every widget output beside the live
view, so GitHub, nbviewer, an HTML export and a notebook opened before it runs all show a real
figure. A model with many layers (more than BESIDE_MAX_LAYERS, e.g. SmolLM2's 30 x 9 heads) gets
its grid under the map and turned, layers along the x axis, so the picture stays about 1000 x 850
pixels instead of a column two metres tall. :func:`static_html` wraps the PNG for front ends
that prefer HTML.

matplotlib is imported inside the functions (Agg canvas, no pyplot), so importing the widgets
stays cheap.
"""
from __future__ import annotations

import base64
import html
import io
import textwrap
import warnings
from typing import Any

import numpy as np

from .state import LABEL_CHARS, LEVELS, AttentionState

MAX_PIXELS = 128  # cells a side in the static picture; longer inputs are block-averaged (the title says so)
MAX_LABELS = 40  # token labels per axis in the static picture; longer inputs label every n-th token
DPI = 80
BESIDE_MAX_LAYERS = 8  # up to this many layers the grid stands beside the map (layers as rows), else under it, turned
THUMB_PX = {False: (40, 6), True: (28, 4)}  # (pixels of a grid thumbnail, pixels between two): beside, turned
PIN = "#ff3030"


def _label(token: str) -> str:
    return token if len(token) <= LABEL_CHARS else token[:LABEL_CHARS - 1] + "\u2026"


def _ticks(ax: Any, tokens: tuple[str, ...], axis: str, block: int) -> None:
    """Label every n-th token (at most MAX_LABELS); ``block`` = tokens per drawn cell."""
    every = block * max(1, int(np.ceil(len(tokens) / block / MAX_LABELS)))
    idx = list(range(0, len(tokens), every))
    at = [(i + 0.5) / block - 0.5 for i in idx]
    if axis == "x":
        ax.set_xticks(at, [_label(tokens[i]) for i in idx], rotation=90, fontsize=7)
    else:
        ax.set_yticks(at, [_label(tokens[i]) for i in idx], fontsize=7)


def _block_means(display: np.ndarray) -> tuple[np.ndarray, int]:
    """``display (layers, heads, Lq, Lk)`` (NaN = masked) in blocks of ``step`` tokens a side so that at most
    MAX_PIXELS cells remain (masked cells left out of a block's mean); and ``step``."""
    L, H, Lq, Lk = display.shape
    step = int(np.ceil(max(Lq, Lk) / MAX_PIXELS))
    if step == 1:
        return display.astype(np.float64), 1
    data = np.pad(display.astype(np.float64), ((0, 0), (0, 0), (0, -Lq % step), (0, -Lk % step)),
                  constant_values=np.nan)
    data = data.reshape(L, H, data.shape[2] // step, step, data.shape[3] // step, step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-masked block: NaN, drawn as masked
        return np.nanmean(data, axis=(3, 5)), step                          # (L, H, ceil(Lq/step), ceil(Lk/step))


def _mark(ax: Any, s: AttentionState, rows: int, cols: int, block: int, lw: float = 2.0) -> None:
    """Outline the pinned query row and/or key column (of a picture of ``rows x cols`` drawn cells)."""
    from matplotlib.patches import Rectangle

    if s.selected is not None:
        ax.add_patch(Rectangle((-0.5, s.selected // block - 0.5), cols, 1, fill=False, ec=PIN, lw=lw))
    if s.selected_key is not None:
        ax.add_patch(Rectangle((s.selected_key // block - 0.5, -0.5), 1, rows, fill=False, ec=PIN, lw=lw, ls="--"))


def _grid(ax: Any, s: AttentionState, data: np.ndarray, cmap: Any, block: int, turned: bool) -> None:
    """Every layer x head of ``data (layers, heads, rows, cols)`` as one mosaic image (one axes: fast even for
    30 x 9 heads); ``turned``: heads as rows and layers as columns."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    L, H, rows, cols = data.shape
    T, G = THUMB_PX[turned]
    place = (lambda l, h: (h, l)) if turned else (lambda l, h: (l, h))            # (mosaic row, column) of map (l, h)
    n_r, n_c = place(L, H)
    lut = np.vstack([(cmap(np.linspace(0, 1, LEVELS))[:, :3] * 255).round(), [s.mask_rgb]]).astype(np.uint8)
    yi = (np.arange(T) * rows // T)[:, None]                                    # nearest cell of each thumbnail pixel
    xi = (np.arange(T) * cols // T)[None, :]
    step = T + G
    mosaic = np.full((n_r * step - G, n_c * step - G, 3), 255, np.uint8)         # white gaps
    pins = []
    for l in range(L):
        for h in range(H):
            lo, hi = s.range(l, h)
            m = data[l, h][yi, xi]                                                 # (T, T)
            k = np.clip(np.round((np.nan_to_num(m) - lo) / (hi - lo) * (LEVELS - 1)), 0, LEVELS - 1)
            r, c = place(l, h)
            mosaic[r * step:r * step + T, c * step:c * step + T] = lut[np.where(np.isnan(m), LEVELS, k).astype(int)]
            if s.selected is not None:
                pins.append(Rectangle((c * step - 0.5, r * step + (s.selected // block) * T / rows - 0.5), T,
                                      max(1.0, T / rows)))
            if s.selected_key is not None:
                pins.append(Rectangle((c * step + (s.selected_key // block) * T / cols - 0.5, r * step - 0.5),
                                      max(1.0, T / cols), T))
    ax.imshow(mosaic, interpolation="nearest")
    ax.set_xlim(-4, mosaic.shape[1] + 3), ax.set_ylim(mosaic.shape[0] + 3, -4)  # room for the outline
    shared = s.scale != "map"
    layer_labels = [_label(s.layer_names[l]) + (" {:.2f}-{:.2f}".format(*s.range(l, 0)) if shared else "")
                    for l in range(L)]
    head_labels = [f"head {h}" for h in range(H)]
    rows_of, cols_of = (head_labels, layer_labels) if turned else (layer_labels, head_labels)
    ax.set_yticks([r * step + T / 2 for r in range(n_r)], rows_of, fontsize=7)
    ax.set_xticks([c * step + T / 2 for c in range(n_c)], cols_of, fontsize=7, rotation=90)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    note = {"map": "one colour scale per map: heads NOT comparable", "layer": "one colour scale per layer",
            "model": "one colour scale for the whole model"}.get(s.scale) or f"fixed colour scale {s.vmin:.3g} to {s.vmax:.3g}"
    clip = "; sink column clipped (the top ignores each map's heaviest key)" if s.clip_sink else ""
    title = f"every layer x head; {note}{' (range beside each layer)' if shared else ''}{clip}"
    # wrapped to the grid's width (about 15 characters of 8-point text per inch), so that a grid of one or two heads
    # does not run its title under the map beside it
    ax.set_title(textwrap.fill(title, max(30, int(15 * (n_c * step / DPI + 0.8)))), fontsize=8)
    r, c = place(s.layer, s.head)
    ax.add_patch(Rectangle((c * step - 2, r * step - 2), T + 3, T + 3, fill=False, ec=PIN, lw=2))
    ax.add_collection(PatchCollection(pins, facecolor="none", edgecolor=PIN, linewidth=0.8))


def static_png(s: AttentionState) -> bytes:
    """A labelled PNG of ``s`` (the map on display; an explorer's grid of every head too)."""
    from PIL import Image

    fig = static_figure(s)
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.05)  # tight: no label cut off
    image = Image.open(rgba).convert("RGB")
    buf = io.BytesIO()  # a 256-colour palette PNG (Pillow): a third of the bytes of RGBA, no metadata, stable
    image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def static_figure(s: AttentionState):
    """The matplotlib Figure behind :func:`static_png` (with an Agg canvas attached)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    cmap = ListedColormap(s.palette / 255.0).with_extremes(bad=np.asarray(s.mask_rgb) / 255.0)
    data, step = _block_means(s.display)                                        # (layers, heads, rows, cols)
    L, H, Lq, Lk = s.shape
    rows, cols = data.shape[2:]
    pins = "".join([f"; pinned query: {s.query_tokens[s.selected]!r}" if s.selected is not None else "",
                    f"; pinned key: {s.key_tokens[s.selected_key]!r}" if s.selected_key is not None else ""])
    side = min(5.5, max(2.8, 0.22 * max(Lq, Lk) + 1.5))
    turned = L > BESIDE_MAX_LAYERS
    if s.kind == "heatmap":
        fig = Figure(figsize=(side + 1.2, side), dpi=DPI, layout="constrained")
        target, fig_title = fig.subplots(), s.title
    else:
        fig_title = f"{s.title + ': ' if s.title else ''}{s.layer_names[s.layer]}, head {s.head}"
        if turned:  # the map above, the grid under it with layers along x
            T, G = THUMB_PX[True]
            grid_w, grid_h = L * (T + G) / DPI + 1.0, H * (T + G) / DPI + 1.6
            fig = Figure(figsize=(max(grid_w, side + 1.2), side + grid_h), dpi=DPI, layout="constrained")
            top, bottom = fig.subfigures(2, 1, height_ratios=[side, grid_h])
            target, spare = top.subplots(1, 2, width_ratios=[side + 1.2, max(0.1, grid_w - side - 1.2)])
            spare.set_axis_off()
            ax_grid = bottom.subplots()
        else:  # the grid beside the map, layers as rows
            grid_w = min(11.0, 0.75 * H + 1.6)
            fig = Figure(figsize=(grid_w + side + 1.2, max(side, 0.75 * L + 1.2)), dpi=DPI, layout="constrained")
            ax_grid, target = fig.subplots(1, 2, width_ratios=[grid_w, side + 1.2])
        _grid(ax_grid, s, data, cmap, step, turned)
    lo, hi = s.range(s.layer, s.head)
    im = target.imshow(data[s.layer, s.head], cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest", aspect="auto")
    _ticks(target, s.key_tokens, "x", step), _ticks(target, s.query_tokens, "y", step)
    target.set_xlabel("key (attended to)", fontsize=8), target.set_ylabel("query (looking)", fontsize=8)
    _mark(target, s, rows, cols, step)
    target.set_title((fig_title + "\n" if fig_title else "") + f"static picture{pins}"
                     + (f"\n(block means of {step} x {step} tokens; the live widget shows every cell)" if step > 1 else ""),
                     fontsize=8)
    bar = target.figure.colorbar(im, ax=target, shrink=0.85, extend="max" if s.clip_sink else "neither")
    bar.set_label(("value (diverging around 0)" if s.raw_scores else "attention weight")
                  + ("; sink clipped" if s.clip_sink else ""), fontsize=8)
    bar.ax.tick_params(labelsize=7)
    if np.isnan(data).any():  # masked cells: their own colour, named under the colour bar
        from matplotlib.patches import Patch

        target.legend(handles=[Patch(color=np.asarray(s.mask_rgb) / 255, label="masked")], fontsize=7,
                      loc="upper left", bbox_to_anchor=(1.0, -0.02), frameon=False, handlelength=1)
    FigureCanvasAgg(fig)
    return fig


def static_html(png: bytes, caption: str) -> str:
    """The PNG as an ``<img>`` with a caption, for front ends that prefer HTML (no script, no ids)."""
    alt = html.escape(caption)
    return (f"<figure style='margin:0'><img alt='{alt}' style='max-width:100%' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
            f"<figcaption style='font-size:12px'>{alt}. Static preview: run the notebook with a live kernel "
            "to hover and click.</figcaption></figure>")
