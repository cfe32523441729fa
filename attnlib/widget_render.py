"""Pictures and pages of attnlib.widgets that need no kernel: the static PNG and the HTML export.

* :func:`static_png` draws what a widget shows as a labelled matplotlib figure (tokens on
  the axes, a colour bar with numbers, masked cells in their own colour, the pinned query or
  key marked; for an explorer, the grid of every layer and head on the widget's scale). It
  goes into the widget's output beside the live view, so GitHub, nbviewer, an HTML export
  and a notebook opened before it runs all show a real figure.
* :func:`export_html` writes one self-contained HTML page (data, script, styles inline) that
  runs the same browser code from ``file://`` with no network and no kernel.

matplotlib is imported inside the functions (Agg canvas, no pyplot), so importing
attnlib.widgets stays cheap.
"""
from __future__ import annotations

import base64
import html
import io
import json
import pathlib
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .widgets import _AttentionWidget

MAX_PIXELS = 128  # cells a side in the static picture; longer inputs are block-averaged (the title says so)
MAX_LABELS = 40  # token labels per axis in the static picture; longer inputs label every n-th token
DPI = 80
THUMB, GAP = 40, 6  # pixels of a grid thumbnail in the static picture, and between two


def _ticks(ax: Any, tokens: list[str], axis: str, block: int) -> None:
    """Label every n-th token (at most MAX_LABELS); ``block`` = tokens per drawn cell."""
    every = block * max(1, int(np.ceil(len(tokens) / block / MAX_LABELS)))
    idx = list(range(0, len(tokens), every))
    labels = [tokens[i] if len(tokens[i]) <= 12 else tokens[i][:11] + "\u2026" for i in idx]
    at = [(i + 0.5) / block - 0.5 for i in idx]
    if axis == "x":
        ax.set_xticks(at, labels, rotation=90, fontsize=7)
    else:
        ax.set_yticks(at, labels, fontsize=7)


def _colormap(w: "_AttentionWidget") -> Any:
    from matplotlib.colors import ListedColormap

    return ListedColormap(w._palette_lut / 255.0).with_extremes(bad=np.asarray(w._mask_rgb) / 255.0)


def _mark(ax: Any, w: "_AttentionWidget", rows: int, cols: int, block: int, lw: float = 2.0) -> None:
    """Outline the pinned query row and/or key column (of a picture of ``rows x cols`` drawn cells)."""
    from matplotlib.patches import Rectangle

    if w.selected is not None:
        ax.add_patch(Rectangle((-0.5, w.selected // block - 0.5), cols, 1, fill=False, ec="#ff3030", lw=lw))
    if w.selected_key is not None:
        ax.add_patch(Rectangle((w.selected_key // block - 0.5, -0.5), 1, rows, fill=False, ec="#ff3030", lw=lw, ls="--"))


def _grid(ax: Any, w: "_AttentionWidget", data: np.ndarray, cmap: Any, block: int) -> None:
    """Every layer x head as one mosaic image (one axes: fast even for 6 x 12 heads)."""
    from matplotlib.patches import Rectangle

    L, H, rows, cols = data.shape
    lut = np.vstack([(cmap(np.linspace(0, 1, 256))[:, :3] * 255).round(), [w._mask_rgb]]).astype(np.uint8)  # (257, 3)
    yi = (np.arange(THUMB) * rows // THUMB)[:, None]                          # nearest cell of each thumbnail pixel
    xi = (np.arange(THUMB) * cols // THUMB)[None, :]
    step = THUMB + GAP
    mosaic = np.full((L * step - GAP, H * step - GAP, 3), 255, np.uint8)     # white gaps
    for l in range(L):
        for h in range(H):
            lo, hi = w._range(l, h)
            m = data[l, h][yi, xi]                                             # (THUMB, THUMB)
            idx = np.where(np.isnan(m), 256, np.clip(np.round((np.nan_to_num(m) - lo) / (hi - lo) * 255), 0, 255))
            mosaic[l * step:l * step + THUMB, h * step:h * step + THUMB] = lut[idx.astype(int)]
    ax.imshow(mosaic, interpolation="nearest")
    ax.set_xlim(-4, mosaic.shape[1] + 3), ax.set_ylim(mosaic.shape[0] + 3, -4)  # room for the outline
    ranges = [w._range(l, 0) for l in range(L)]
    shared = w.scale != "map"
    ax.set_yticks([l * step + THUMB / 2 for l in range(L)],
                  [f"{w._layer_names[l]}" + (f"\n{ranges[l][0]:.2f} to {ranges[l][1]:.2f}" if shared else "")
                   for l in range(L)], fontsize=7)
    ax.set_xticks([h * step + THUMB / 2 for h in range(H)], [f"head {h}" for h in range(H)], fontsize=7, rotation=90)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    note = {"map": "one colour scale per map: heads NOT comparable", "layer": "one colour scale per layer (range beside it)",
            "model": "one colour scale for the whole model"}.get(w.scale) or f"fixed colour scale {w.vmin:.3g} to {w.vmax:.3g}"
    ax.set_title(f"every layer x head; {note}", fontsize=8)
    cur_l, cur_h = w.layer, w.head
    ax.add_patch(Rectangle((cur_h * step - 2, cur_l * step - 2), THUMB + 3, THUMB + 3, fill=False, ec="#ff3030", lw=2))
    for l in range(L):
        for h in range(H):
            if w.selected is not None:
                y = l * step + (w.selected // block) * THUMB / rows
                ax.add_patch(Rectangle((h * step - 0.5, y - 0.5), THUMB, max(1.0, THUMB / rows), fill=False, ec="#ff3030", lw=0.8))
            if w.selected_key is not None:
                x = h * step + (w.selected_key // block) * THUMB / cols
                ax.add_patch(Rectangle((x - 0.5, l * step - 0.5), max(1.0, THUMB / cols), THUMB, fill=False, ec="#ff3030", lw=0.8))


def static_png(w: "_AttentionWidget") -> bytes:
    """A labelled PNG of the widget as it is now (the map on display; explorer: every head too)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    cmap, data = _colormap(w), w._display_array()                          # (layers, heads, Lq, Lk), NaN = masked
    L, H, Lq, Lk = data.shape
    step = int(np.ceil(max(Lq, Lk) / MAX_PIXELS))
    if step > 1:  # block-average long inputs to <= MAX_PIXELS cells a side (masked cells are left out of a block's mean)
        data = np.pad(data, ((0, 0), (0, 0), (0, -Lq % step), (0, -Lk % step)), constant_values=np.nan)
        data = data.reshape(L, H, data.shape[2] // step, step, data.shape[3] // step, step)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-masked block: NaN, drawn as masked
            data = np.nanmean(data, axis=(3, 5))
    rows, cols = data.shape[2:]
    q, k = w._query_tokens, w._key_tokens
    pins = "".join([f"; pinned query: {q[w.selected]!r}" if w.selected is not None else "",
                    f"; pinned key: {k[w.selected_key]!r}" if w.selected_key is not None else ""])
    layer, head = (w.layer, w.head) if w._kind == "explorer" else (0, 0)
    side = min(5.5, max(2.8, 0.22 * max(Lq, Lk) + 1.5))
    if w._kind == "explorer":
        grid_w = min(11.0, 0.75 * H + 1.6)
        fig = Figure(figsize=(grid_w + side + 1.2, max(side, 0.75 * L + 1.2)), dpi=DPI, layout="constrained")
        ax_grid, target = fig.subplots(1, 2, width_ratios=[grid_w, side + 1.2])
        _grid(ax_grid, w, data, cmap, step)
        fig_title = f"{w.title + ': ' if w.title else ''}{w._layer_names[layer]}, head {head}"
    else:
        fig = Figure(figsize=(side + 1.2, side), dpi=DPI, layout="constrained")
        target, fig_title = fig.subplots(), w.title
    lo, hi = w._range(layer, head)
    im = target.imshow(data[layer, head], cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest", aspect="auto")
    _ticks(target, k, "x", step), _ticks(target, q, "y", step)
    target.set_xlabel("key (attended to)", fontsize=8), target.set_ylabel("query (looking)", fontsize=8)
    _mark(target, w, rows, cols, step)
    target.set_title((fig_title + "\n" if fig_title else "") + f"static picture{pins}"
                     + (f"\n(block means of {step} x {step} tokens; the live widget shows every cell)" if step > 1 else ""), fontsize=8)
    bar = target.figure.colorbar(im, ax=target, shrink=0.85)
    bar.set_label("value (diverging around 0)" if w.raw_scores else "attention weight", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    if np.isnan(data).any():  # masked cells: their own colour, named under the colour bar
        from matplotlib.patches import Patch

        target.legend(handles=[Patch(color=np.asarray(w._mask_rgb) / 255, label="masked")], fontsize=7,
                      loc="upper left", bbox_to_anchor=(1.0, -0.02), frameon=False, handlelength=1)
    FigureCanvasAgg(fig)
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.05)  # tight: no label cut off
    image = Image.open(rgba).convert("RGB")
    buf = io.BytesIO()  # a 256-colour palette PNG (Pillow): a third of the bytes of RGBA, no metadata, stable
    image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def static_html(w: "_AttentionWidget", png: bytes, caption: str) -> str:
    """The PNG as an ``<img>`` with a caption, for front ends that prefer HTML (no script, no ids)."""
    alt = html.escape(caption)
    return (f"<figure style='margin:0'><img alt='{alt}' style='max-width:100%' "
            f"src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
            f"<figcaption style='font-size:12px'>{alt}. Static preview: run the notebook with a live kernel "
            "to hover and click.</figcaption></figure>")


# Outputs whose weights exceed this many bytes carry no export payload (the notebook would grow by
# that much); the static site then shows their labelled picture instead of a live widget.
PAYLOAD_MAX_BYTES = 4_000_000


def export_state(w: "_AttentionWidget") -> dict:
    """Everything a kernel-free page needs to draw ``w``: ``{"state": plain traits, "binary": {name:
    base64}, "title": str}``. JSON-ready; :func:`export_page` turns it into HTML.

    A big explorer (maps sent on demand in a notebook) exports every map quantised to 8 bits
    (``_weights_u8``; its readout then marks values with "≈") plus the exact map on display."""
    state = {name: getattr(w, name) for name in w.trait_names(sync=True) if not name.startswith("_model")
             and not name.startswith("_view") and name not in ("_esm", "_css", "_dom_classes", "layout",
                                                                 "tabbable", "tooltip", "_anywidget_id")}
    if w._lazy:  # no kernel to send maps on demand: every map in 8 bits (the one on display stays exact)
        state["_weights_u8"] = w._quantised()
    binary = {k: base64.b64encode(v).decode() for k, v in state.items() if isinstance(v, bytes)}
    plain = {k: v for k, v in state.items() if not isinstance(v, bytes)}
    return {"state": plain, "binary": binary, "title": w.title or type(w).__name__}


def export_page(payload: dict) -> str:
    """One self-contained HTML page (script, styles and data inline; no network) from :func:`export_state`."""
    from .widgets import _AttentionWidget

    script = pathlib.Path(_AttentionWidget._esm_path).read_text().replace("export default { render };", "")
    title = html.escape(payload["title"])
    state_json = json.dumps(payload["state"]).replace("</", "<\\/")  # a token "</script>" cannot end the block
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<style>{pathlib.Path(_AttentionWidget._css_path).read_text()}</style></head>
<body style="font-family:sans-serif">
<div id="attnlib-export"></div>
<script id="attnlib-state" type="application/json">{state_json}</script>
<script id="attnlib-binary" type="application/json">{json.dumps(payload["binary"])}</script>
<script>
{script}
(() => {{
  const s = JSON.parse(document.getElementById("attnlib-state").textContent);
  const b = JSON.parse(document.getElementById("attnlib-binary").textContent);
  for (const [k, v] of Object.entries(b)) s[k] = Uint8Array.from(atob(v), (c) => c.charCodeAt(0));
  const listeners = {{}};
  const model = {{  // a kernel-free model: the page is its own state
    get: (k) => s[k],
    set: (k, v) => {{ const old = s[k]; s[k] = v; if (old !== v) (listeners["change:" + k] || []).forEach((f) => f()); }},
    on: (ev, f) => {{ (listeners[ev] = listeners[ev] || []).push(f); }},
    off: (ev, f) => {{ listeners[ev] = (listeners[ev] || []).filter((g) => g !== f); }},
    save_changes() {{}},
  }};
  window.attnlibModel = model;
  render({{ model, el: document.getElementById("attnlib-export") }});
}})();
</script></body></html>
"""


def export_html(w: "_AttentionWidget", path: str | pathlib.Path) -> pathlib.Path:
    """Write ``w`` as one self-contained HTML page (works from file://, no network); return the path."""
    path = pathlib.Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"path must end in .html or .htm, got {str(path)!r}")
    if not path.parent.exists():
        raise ValueError(f"the folder of path does not exist: {str(path.parent)!r}")
    path.write_text(export_page(export_state(w)), encoding="utf-8")
    return path
