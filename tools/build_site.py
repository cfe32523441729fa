"""Build the static site of the series from the notebooks as committed (no re-execution).

    python tools/build_site.py [--out build/site]

Sphinx + myst-nb (``nb_execution_mode = "off"``) turn a temporary copy of ``site/`` and of
``notebooks/*.ipynb`` into HTML. The committed notebooks are only read. In the copy, every
widget output is rewritten first:

* an output with the kernel-free export (mime ``application/vnd.attnlib.widget+json``, see
  ``attnlib.viz.export.export_state``) becomes a live widget: an ``<iframe>`` to a page that
  ``export_page`` writes into ``widgets/`` of the site (script, styles and data inline), with its
  labelled picture as the ``<noscript>`` fallback. A compare output becomes three such frames,
  linked as in Jupyter (layer, head and pins follow each other through ``postMessage``);
* a cell folded in Jupyter stays folded on the page, through myst-nb's cell tags: with
  ``"jupyter": {"source_hidden": true, "outputs_hidden": true}`` (an exercise's solution) its
  code and its output go into one fold, closed until the reader opens it ("Show the solution",
  tag ``hide-cell``); with only one of the two, that part alone is folded (``hide-input`` /
  ``hide-output``). A solution cell (code starting ``# Solution``) whose output is not hidden
  is reported, since its answer would be on screen;
* any other widget output keeps its labelled picture (``text/html`` / ``image/png``), or its
  text (a tqdm bar's last line); the ``application/vnd.jupyter.widget-view+json`` entry is
  dropped, since rendering it would need require.js and the widget manager from a CDN.

The index groups the notebooks into the series' parts by number (``PARTS``): each part gets
its table (title and the notebook's "By the end you will ..." sentence) and its toctree, so a
new notebook (``notebooks/NN_*.ipynb``) appears without editing ``site/index.md``. The other
pages of ``site/`` (installing, tests, widgets, timings, ...) are plain Markdown, listed in the
toctree of ``site/index.md``.

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
EXPORT_MIME = "application/vnd.attnlib.widget+json"  # = attnlib.viz.export.EXPORT_MIME (checked in main)
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


def widget_api():
    """(EXPORT_MIME, export_page) from ``attnlib.viz.export``."""
    import importlib

    export = importlib.import_module("attnlib.viz.export")
    return export.EXPORT_MIME, export.export_page


def widget_page(payload: dict) -> str:
    """The kernel-free page of one exported widget, plus the frame script."""
    page = widget_api()[1](payload)
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


SOLUTION = "# Solution"  # how an exercise's solution cell starts (tests/test_notebooks.py checks the form)
SOLUTION_PROMPTS = {"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}


def fold(cell: dict, stats: dict) -> None:
    """Give a cell folded in Jupyter (``metadata.jupyter``) the myst-nb tag that folds the same parts on the page.

    source_hidden and outputs_hidden: ``hide-cell`` (code and output in one closed fold); one of the
    two: ``hide-input`` or ``hide-output``. Counts the folded solutions in ``stats["hidden"]`` and
    the solutions whose output would be on screen in ``stats["answers_shown"]``.
    """
    if cell.get("cell_type") != "code":
        return
    meta = cell.setdefault("metadata", {})
    hidden = meta.get("jupyter", {})
    source, outputs = bool(hidden.get("source_hidden")), bool(hidden.get("outputs_hidden"))
    solution = "".join(cell.get("source", [])).lstrip().startswith(SOLUTION)
    tag = {(True, True): "hide-cell", (True, False): "hide-input", (False, True): "hide-output"}.get((source, outputs))
    if tag is None:
        return
    tags = meta.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)
    if solution:
        meta.setdefault("mystnb", {}).update(SOLUTION_PROMPTS)  # the fold's label, instead of "Show code cell content"
        stats["hidden"] += 1
        if not outputs and cell.get("outputs"):
            stats["answers_shown"] += 1


def rewrite_outputs(nb: dict, stem: str, extra: Path) -> tuple[dict, dict]:
    """A copy of ``nb`` whose widget outputs the site can show (see the module docstring), and counts."""
    nb = copy.deepcopy(nb)
    nb["metadata"].pop("widgets", None)
    stats = {"live": 0, "picture": 0, "text": 0, "hidden": 0, "answers_shown": 0}
    index = 0
    for cell in nb["cells"]:
        fold(cell, stats)
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
PARTS = [  # (first and last notebook number, toctree caption, what the part does: a sentence for the index)
    (0, 9, "Part I: from seq2seq to the transformer",
     "Part I goes from the bottleneck of an RNN encoder-decoder to a transformer block, and then looks inside "
     "the trained models and a real pretrained one."),
    (10, 12, "Part II: generating, and attention at scale",
     "Part II builds the transformers that generate and the tricks that make attention scale."),
    (13, 99, "Part III: a real modern LLM",
     "Part III runs a real modern LLM, SmolLM2-135M, through the series' own code: its file, its KV cache, "
     "its induction heads and its attention sinks."),
]


def part_of(path: Path) -> int:
    """Index in PARTS of the part that holds notebook ``NN_*.ipynb``."""
    number = int(path.name[:2])
    for k, (first, last, _, _) in enumerate(PARTS):
        if first <= number <= last:
            return k
    raise ValueError(f"{path.name}: notebook {number} belongs to no part of PARTS in tools/build_site.py")


def map_rows(notebooks: list[Path]) -> list[str]:
    """One table row per notebook: number, title (linked) and the first cell's "By the end you will ..." sentence."""
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
    return rows


def series_map(notebooks: list[Path]) -> str:
    """The series by part: a heading, the part's sentence, its table and its (hidden) toctree; empty parts left out."""
    blocks = []
    for k, (_, _, caption, sentence) in enumerate(PARTS):
        members = [p for p in notebooks if part_of(p) == k]
        if not members:
            continue
        toctree = "\n".join(["```{toctree}", f':caption: "{caption}"', ":maxdepth: 1", ":hidden:", "",
                             *(f"notebooks/{p.stem}" for p in members), "```"])
        blocks.append(f"### {caption}\n\n{sentence}\n\n" + "\n".join(map_rows(members)) + f"\n\n{toctree}\n")
    return "\n".join(blocks)


def build(out: Path, jobs: str = "1", notebooks_dir: Path = NOTEBOOKS) -> dict:
    """Build the site into ``out`` (replaced if it is an earlier build) from ``notebooks_dir/NN_*.ipynb``;
    return counts and sizes."""
    from sphinx.cmd.build import build_main

    mime = widget_api()[0]
    if mime != EXPORT_MIME:
        raise ValueError(f"EXPORT_MIME is {mime!r} in attnlib but {EXPORT_MIME!r} here")
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
        notebooks = sorted(Path(notebooks_dir).glob("[0-9][0-9]_*.ipynb"))
        if not notebooks:
            raise ValueError(f"no notebooks NN_*.ipynb in {notebooks_dir}")
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
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="folder of the NN_*.ipynb to show (default notebooks/)")
    parser.add_argument("-j", "--jobs", default="1", help="sphinx-build -j (default 1: sphinx-mathjax-offline is not marked safe for parallel reading)")
    args = parser.parse_args(argv)
    report = build(args.out, args.jobs, args.notebooks)
    for stem, stats in report["notebooks"].items():
        print(f"{stem:28s} live widgets {stats['live']:2d}  pictures {stats['picture']:2d}  text {stats['text']:2d}"
              f"  folded solutions {stats['hidden']:2d}")
    shown = {stem: stats["answers_shown"] for stem, stats in report["notebooks"].items() if stats["answers_shown"]}
    if shown:
        print(f"warning: solutions whose output (the answer) is on the page, for want of "
              f'"outputs_hidden": true in their cell metadata: {shown}', file=sys.stderr)
    size, page = report["largest"]
    print(f"largest page: {page}, {size / 1e6:.2f} MB with its images and widget pages")
    print(f"built {args.out} in {report['seconds']:.1f} s; open {args.out.resolve() / 'index.html'}")


if __name__ == "__main__":
    main(sys.argv[1:])
