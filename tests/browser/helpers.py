"""Helpers of the JS-level widget tests: a bare page on a fake origin with a fake anywidget model.

ES modules do not load from file://, so the page and the bundled ESM/CSS are served from
``http://attnlib.test/`` by ``page.route`` (nothing touches the network).
"""
from __future__ import annotations

import base64
import statistics
from pathlib import Path

import attnlib.widgets

ROOT = Path(__file__).resolve().parents[2]  # the repository
STATIC = Path(attnlib.widgets.__file__).parent / "static"
ORIGIN = "http://attnlib.test"

# A fake model with the parts of the anywidget model API the view uses. Like Backbone,
# set() fires "change:<name>" listeners synchronously; save_changes() only counts.
PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="/attention.css"></head>
<body style="font-family:sans-serif"><script type="module">
import widget from "/attention.js";
function dataView(b64, offset) {   // like ipywidgets: binary traits arrive as DataViews
  const raw = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const buf = new Uint8Array(raw.length + offset); buf.set(raw, offset);
  return new DataView(buf.buffer, offset, raw.length);
}
// Decode the base64 fields once (the decoding is the harness's cost, not the widget's).
window.prepare = (state, offset = 0) =>
  ({ ...state, _weights: dataView(state._weights, offset), _palette: dataView(state._palette, 0) });
window.mount = (name, state, offset = 0) => {
  const listeners = {};
  const s = typeof state._weights === "string" ? prepare(state, offset) : { ...state };
  const model = {
    saves: 0,
    get: (k) => s[k],
    set: (k, v) => { const old = s[k]; s[k] = v; if (old !== v) (listeners["change:" + k] || []).forEach((f) => f()); },
    on: (ev, f) => { (listeners[ev] = listeners[ev] || []).push(f); },
    off: (ev, f) => { listeners[ev] = (listeners[ev] || []).filter((g) => g !== f); },
    save_changes() { this.saves += 1; },
  };
  const el = document.createElement("div");
  el.id = name;
  document.body.append(el);
  const t0 = performance.now();
  const cleanup = widget.render({ model, el });
  const ms = performance.now() - t0;
  (window.models = window.models || {})[name] = model;
  (window.cleanups = window.cleanups || {})[name] = cleanup;
  return ms;
};
window.ready = true;
</script></body></html>"""


def widget_state(w: attnlib.widgets._AttentionWidget) -> dict:
    """The synced state the view reads, JSON-friendly (binary traits as base64)."""
    skip = {"_esm", "_css", "_dom_classes", "layout", "tabbable", "tooltip", "_anywidget_id"}
    state = {k: getattr(w, k) for k in w.trait_names(sync=True)
             if k not in skip and not k.startswith(("_model", "_view"))}
    return {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in state.items()}


def open_bare_page(context):
    """A new page on the fake origin with ``window.mount(name, state)`` ready, and its list of JS errors."""
    page = context.new_page()
    files = {"/": ("text/html", PAGE), "/attention.js": ("text/javascript", (STATIC / "attention.js").read_text()),
             "/attention.css": ("text/css", (STATIC / "attention.css").read_text())}

    def serve(route):
        path = "/" + route.request.url.removeprefix(ORIGIN).lstrip("/").split("?")[0]
        if path in files:
            content_type, body = files[path]
            route.fulfill(status=200, content_type=content_type, body=body)
        else:
            route.fulfill(status=404, body="not found")

    page.route(f"{ORIGIN}/**", serve)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{ORIGIN}/")
    page.wait_for_function("window.ready === true", timeout=10_000)
    return page, errors


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))
