"""Widgets without a kernel: one self-contained HTML page per widget, from its :class:`AttentionState`.

* :func:`export_state` turns a state into a JSON-ready payload: the fields of the page's model
  (:func:`attnlib.viz.state.page_model` with no kernel), binary ones in base64. Every widget
  output carries it under :data:`EXPORT_MIME` (when it weighs at most PAYLOAD_MAX_BYTES), so
  the series' static site (tools/build_site.py) can show a live widget.
* :func:`export_page` makes the page from a payload: data, script and styles inline, no network;
  it runs the same browser code (``static/attention.js``) from ``file://`` with a kernel-free model.
* :func:`export_html` writes that page (``widget.to_html(path)``).
"""
from __future__ import annotations

import base64
import html
import json
import pathlib

import numpy as np

from .state import PAGE_CONSTANTS, AttentionState, page_model

STATIC = pathlib.Path(__file__).parent / "static"
ESM, CSS = STATIC / "attention.js", STATIC / "attention.css"  # the widgets' browser code, bundled
# The mime type under which every widget output also carries its kernel-free export; Jupyter and
# GitHub ignore it, the static site renders it live.
EXPORT_MIME = "application/vnd.attnlib.widget+json"
# Outputs whose map data exceed this many bytes carry no export payload (the notebook would grow by
# that much); the static site then shows their labelled picture instead of a live widget.
PAYLOAD_MAX_BYTES = 4_000_000


def export_nbytes(s: AttentionState) -> int:
    """Bytes of map data an export of ``s`` carries: float32, or 8 bits a cell for a big explorer."""
    return int(np.prod(s.shape)) * (1 if s.lazy else 4)


def export_state(s: AttentionState) -> dict:
    """Everything a kernel-free page needs to draw ``s``: ``{"state": plain fields, "binary": {name:
    base64}, "title": str}``. A big explorer carries every map in 8 bits (its readout then marks
    values with "≈") and the exact map on display."""
    fields = page_model(s, kernel=False)
    binary = {k: base64.b64encode(v).decode() for k, v in fields.items() if isinstance(v, bytes)}
    plain = {k: v for k, v in fields.items() if not isinstance(v, bytes)}
    return {"state": plain, "binary": binary, "title": s.title or ("AttentionExplorer" if s.kind == "explorer"
                                                                    else "AttentionHeatmap")}


def _stored_before_viz(state: dict) -> dict:
    """A payload stored in a notebook executed before attnlib.viz lacks ``_constants`` (the numbers it was made
    with are today's), ``clip_sink`` and ``_map_rest`` (then the largest value: clipping changes nothing)."""
    return {"_constants": PAGE_CONSTANTS, "clip_sink": False, "_map_rest": state.get("_map_hi", []), **state}


def export_page(payload: dict) -> str:
    """One self-contained HTML page (script, styles and data inline; no network) from :func:`export_state`."""
    script = ESM.read_text().replace("export default { render };", "")
    title = html.escape(payload["title"])
    state_json = json.dumps(_stored_before_viz(payload["state"])).replace("</", "<\\/")  # a token "</script>" cannot end the block
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<style>{CSS.read_text()}</style></head>
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


def export_html(s: AttentionState, path: str | pathlib.Path) -> pathlib.Path:
    """Write ``s`` as one self-contained HTML page (works from file://, no network); return the path."""
    path = pathlib.Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"path must end in .html or .htm, got {str(path)!r}")
    if not path.parent.exists():
        raise ValueError(f"the folder of path does not exist: {str(path.parent)!r}")
    path.write_text(export_page(export_state(s)), encoding="utf-8")
    return path
