"""Build the static site of the series from the notebooks as committed (no re-execution).

    python tools/build_site.py [--out build/site]

Sphinx + myst-nb (``nb_execution_mode = "off"``) turn a temporary copy of ``site/`` and of
``notebooks/*.ipynb`` into HTML. The committed notebooks are only read. In the copy, every
widget output is rewritten first:

* an output with the kernel-free export (mime ``application/vnd.attnlib.widget+json``, see
  ``attnlib.widget_render.export_state``) becomes a live widget: an ``<iframe>`` to a page that
  ``export_page`` writes into ``widgets/`` of the site (script, styles and data inline), with its
  labelled picture as the ``<noscript>`` fallback. A compare output becomes three such frames,
  linked as in Jupyter (layer, head and pins follow each other through ``postMessage``);
* a cell with ``"jupyter": {"source_hidden": true}`` (an exercise's solution) gets myst-nb's
  ``hide-input`` tag: its code is folded on the page too, its output shown;
* any other widget output keeps its labelled picture (``text/html`` / ``image/png``), or its
  text (a tqdm bar's last line); the ``application/vnd.jupyter.widget-view+json`` entry is
  dropped, since rendering it would need require.js and the widget manager from a CDN.

Nothing is fetched: the theme, the search index and MathJax (``sphinx-mathjax-offline``) are
local files, so the site opens from ``file://`` and from any static web server.
"""
from __future__ import annotations

import argparse
import base64
import copy
import html
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE_SRC = ROOT / "site"
NOTEBOOKS = ROOT / "notebooks"
EXPORT_MIME = "application/vnd.attnlib.widget+json"  # = attnlib.widgets.EXPORT_MIME (checked in main)
VIEW_MIME = "application/vnd.jupyter.widget-view+json"
MARKER = ".attnlib-site"  # written into the output folder; only a folder holding it is ever replaced

# Appended to every widget page: tell the parent page our height (so the frame fits), relay the
# linked traits of a compare group, and apply the ones a sibling frame sends.
FRAME_SCRIPT = """<script>
(() => {
  const model = window.attnlibModel;
  const send = (msg) => { if (window.parent !== window) window.parent.postMessage({ attnlib: true, ...msg }, "*"); };
  const size = () => send({ height: Math.ceil(document.documentElement.getBoundingClientRect().height) + 4 });
  new ResizeObserver(size).observe(document.body);
  size();
  let applying = false;
  for (const name of ["layer", "head", "selected", "selected_key"]) {
    model.on("change:" + name, () => { if (!applying) send({ name, value: model.get(name) }); });
  }
  window.addEventListener("message", (e) => {
    const d = e.data || {};
    if (e.source !== window.parent || !d.attnlibLink) return;
    applying = true;
    try { model.set(d.name, d.value); } finally { applying = false; }
  });
})();
</script>
"""


def widget_page(payload: dict) -> str:
    """The kernel-free page of one exported widget, plus the frame script."""
    from attnlib.widget_render import export_page

    page = export_page(payload)
    if "</body></html>" not in page:
        raise ValueError("export_page no longer ends in '</body></html>'; tools/build_site.py must follow it")
    return page.replace("</body></html>", FRAME_SCRIPT + "</body></html>")


def live_output(payload: dict, png: str | None, stem: str, index: int, extra: Path) -> str:
    """Write the widget page(s) of one output; return the HTML that replaces the output on the site."""
    states = payload["compare"] if "compare" in payload else [payload]
    group = f"{stem}-{index}"
    frames, height = [], 560 if len(states) > 1 else 620  # px until the page reports its own height
    for k, state in enumerate(states):
        name = f"{group}-{k}.html" if len(states) > 1 else f"{group}.html"
        (extra / "widgets" / name).write_text(widget_page(state), encoding="utf-8")
        title = html.escape(state.get("title") or "attention widget")
        frames.append(f'<iframe class="attnlib-frame" src="../widgets/{name}" title="{title} (live)" '
                      f'data-group="{group}" style="height:{height}px"></iframe>')
    fallback = ""
    if png:
        (extra / "widgets" / f"{group}.png").write_bytes(base64.b64decode(png))
        fallback = (f'<noscript><img src="../widgets/{group}.png" alt="static picture of the widget"> '
                    "(JavaScript is off: this is the widget's static picture.)</noscript>")
    linked = " The three views are linked: a head or a pin chosen in one is chosen in all." if len(states) > 1 else ""
    return (f'<div class="attnlib-live" data-group="{group}" data-frames="{len(frames)}">'
            f'<div class="attnlib-frames">{"".join(frames)}</div>{fallback}'
            f'<p class="attnlib-caption">Live widget, running in your browser from this site\'s own files: '
            f"hover a token, click to pin it (Escape unpins), switch layer and head.{linked}</p></div>")


def rewrite_outputs(nb: dict, stem: str, extra: Path) -> tuple[dict, dict]:
    """A copy of ``nb`` whose widget outputs the site can show (see the module docstring), and counts."""
    nb = copy.deepcopy(nb)
    nb["metadata"].pop("widgets", None)
    stats = {"live": 0, "picture": 0, "text": 0, "hidden": 0}
    index = 0
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):  # an exercise's solution: folded
            tags = cell["metadata"].setdefault("tags", [])                     # on the site too (myst-nb's tag)
            if "hide-input" not in tags:
                tags.append("hide-input")
            stats["hidden"] += 1
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data or (VIEW_MIME not in data and EXPORT_MIME not in data):
                continue
            data.pop(VIEW_MIME, None)
            payload = data.pop(EXPORT_MIME, None)
            png = data.get("image/png")
            if payload is not None:
                index += 1
                data.clear()
                data["text/html"] = live_output(payload, png, stem, index, extra)
                stats["live"] += 1
            elif png or "text/html" in data:
                stats["picture"] += 1
            else:
                text = "".join(data.get("text/plain", []))
                if text.startswith("Output("):
                    data["text/plain"] = ["(an ipywidgets Output area here; it fills in a running notebook)"]
                stats["text"] += 1
    return nb, stats


MAP_MARKER = "<!-- series-map:"


def series_map(notebooks: list[Path]) -> str:
    """A Markdown table of the series: number, title (linked) and the notebook's first sentence."""
    import re

    rows = ["| # | notebook | by the end you will ... |", "|---|---|---|"]
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "".join(cells[0]["source"]) if cells else ""
        title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)
        if title is None:
            raise ValueError(f"{path.name}: the first cell has no '# title' line")
        promise = re.search(r"By the end you will (.+?[.!?])(?:\s|\*|$)", " ".join(text.split()))
        if promise is None:
            raise ValueError(f"{path.name}: the first cell has no 'By the end you will ...' sentence")
        number, _, name = title.partition("·")
        rows.append(f"| {number.strip()} | [{name.strip() or title}](notebooks/{path.name}) | "
                    f"{promise.group(1).replace('|', '/').replace('**', '')} |")
    return "\n".join(rows) + "\n"


def build(out: Path, jobs: str = "1") -> dict:
    """Build the site into ``out`` (replaced if it is an earlier build); return counts and sizes."""
    import attnlib.widgets
    from sphinx.cmd.build import build_main

    if attnlib.widgets.EXPORT_MIME != EXPORT_MIME:
        raise ValueError(f"EXPORT_MIME is {attnlib.widgets.EXPORT_MIME!r} in attnlib but {EXPORT_MIME!r} here")
    out = out.resolve()
    if out.exists():
        if not (out / MARKER).exists():
            raise ValueError(f"{out} exists and is not a site this tool built (no {MARKER}); refusing to replace it")
        shutil.rmtree(out)
    t0 = time.perf_counter()
    report = {"notebooks": {}}
    with tempfile.TemporaryDirectory(prefix="attnlib-site-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(SITE_SRC, src, ignore=shutil.ignore_patterns("__pycache__"))
        extra = src / "_extra"
        (extra / "widgets").mkdir(parents=True)
        (src / "notebooks").mkdir()
        notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
        index = (src / "index.md").read_text(encoding="utf-8").splitlines(keepends=True)
        at = [i for i, line in enumerate(index) if line.startswith(MAP_MARKER)]
        if len(at) != 1:
            raise ValueError(f"site/index.md must hold one line starting with {MAP_MARKER!r}, found {len(at)}")
        index[at[0]] = series_map(notebooks)
        (src / "index.md").write_text("".join(index), encoding="utf-8")
        for path in notebooks:
            nb, stats = rewrite_outputs(json.loads(path.read_text(encoding="utf-8")), path.stem, extra)
            (src / "notebooks" / path.name).write_text(json.dumps(nb), encoding="utf-8")
            report["notebooks"][path.stem] = stats
        code = build_main(["-b", "html", "-q", "-W", "--keep-going", "-E", "-j", jobs, "-d", str(Path(tmp) / "doctrees"), str(src), str(out)])
        if code != 0:
            raise SystemExit(f"sphinx-build failed with exit code {code} (every Sphinx warning is an error: see above)")
    (out / MARKER).write_text("built by tools/build_site.py\n")
    if (out / "_sources").is_dir() and not any((out / "_sources").iterdir()):
        (out / "_sources").rmdir()  # left empty by html_copy_source = False
    report["seconds"] = time.perf_counter() - t0
    pages = sorted(out.rglob("*.html"))
    report["largest"] = max(((page_bytes(p, out), p.relative_to(out).as_posix()) for p in pages))
    return report


def page_bytes(page: Path, out: Path) -> int:
    """A page's own bytes plus those of the images and widget pages it loads from the site (not shared assets)."""
    import re

    text = page.read_text(encoding="utf-8", errors="replace")
    total = len(text.encode())
    for ref in set(re.findall(r'(?:src)="([^"#?]+)"', text)):
        target = (page.parent / ref).resolve()
        if target.is_file() and out in target.parents and "_static" not in target.parts:
            total += target.stat().st_size
    return total


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    parser.add_argument("-j", "--jobs", default="1", help="sphinx-build -j (default 1: sphinx-mathjax-offline is not marked safe for parallel reading)")
    args = parser.parse_args(argv)
    report = build(args.out, args.jobs)
    for stem, stats in report["notebooks"].items():
        print(f"{stem:28s} live widgets {stats['live']:2d}  pictures {stats['picture']:2d}  text {stats['text']:2d}"
              f"  folded solutions {stats['hidden']:2d}")
    size, page = report["largest"]
    print(f"largest page: {page}, {size / 1e6:.2f} MB with its images and widget pages")
    print(f"built {args.out} in {report['seconds']:.1f} s; open {args.out.resolve() / 'index.html'}")


if __name__ == "__main__":
    main(sys.argv[1:])
