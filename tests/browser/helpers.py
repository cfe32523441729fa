"""Helpers of the JS-level widget tests: a bare page on a fake origin with a fake anywidget model.

ES modules do not load from file://, so the page and the bundled ESM/CSS are served from
``http://attnlib.test/`` by ``page.route`` (nothing touches the network).
"""
from __future__ import annotations

import base64
import os
import shutil
import statistics
from pathlib import Path

import attnlib.viz.widgets
from attnlib.viz.export import STATIC

ROOT = Path(__file__).resolve().parents[2]  # the repository
ORIGIN = "http://attnlib.test"

CHROMIUM_VAR = "CHROMIUM_PATH"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FALSE_WORDS = {"", "0", "false", "no", "off", "n", "f"}


class ChromiumNotFound(Exception):
    """No Chromium or Chrome to drive; the message says where we looked and how to point at one."""


def is_ci(environ=os.environ) -> bool:
    """True when ``CI`` holds any true value (``1``, ``true``, ``yes``, ...); CI services set it."""
    return environ.get("CI", "").strip().lower() not in FALSE_WORDS


def chromium_install_paths(environ=os.environ) -> list[Path]:
    """Where Chromium and Chrome usually live when they are not on the PATH (snap, macOS, Windows)."""
    places = [Path("/snap/bin/chromium"), Path("/usr/lib/chromium/chromium"),
              Path("/Applications/Chromium.app/Contents/MacOS/Chromium"),
              Path("/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"),
              Path.home() / "Applications/Chromium.app/Contents/MacOS/Chromium",
              Path.home() / "Applications/Google Chrome.app/Contents/MacOS/Google Chrome"]
    for var in ("PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA"):
        if environ.get(var):
            places += [Path(environ[var]) / "Google" / "Chrome" / "Application" / "chrome.exe",
                       Path(environ[var]) / "Chromium" / "Application" / "chrome.exe"]
    return places


def find_chromium(environ=os.environ, which=shutil.which, places=None) -> str:
    """The browser to drive: ``$CHROMIUM_PATH``, else a usual name on the PATH, else a usual install folder.

    Raises ChromiumNotFound (what was tried, how to fix it) when there is none, or when
    ``$CHROMIUM_PATH`` names something that is not an executable file.
    """
    named = environ.get(CHROMIUM_VAR, "").strip()
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise ChromiumNotFound(f"{CHROMIUM_VAR}={named!r} is not an executable file")
    for name in CHROMIUM_NAMES:
        found = which(name)
        if found:
            return found
    for place in chromium_install_paths(environ) if places is None else places:
        if place.is_file() and os.access(place, os.X_OK):
            return str(place)
    raise ChromiumNotFound(
        f"no Chromium or Chrome found (${CHROMIUM_VAR} unset; none of {', '.join(CHROMIUM_NAMES)} on the PATH; "
        f"not in the usual install folders). Install one (Debian/Ubuntu: `sudo apt-get install chromium`) "
        f"or set {CHROMIUM_VAR} to its executable")

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
window.prepare = (state, offset = 0) => {
  const out = { ...state, _weights: dataView(state._weights, offset), _palette: dataView(state._palette, 0) };
  for (const k of ["_mask", "_thumbs", "_exact"]) if (typeof state[k] === "string") out[k] = dataView(state[k], 0);
  return out;
};
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


def widget_state(w: attnlib.viz.widgets._AttentionWidget) -> dict:
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
