"""The static site (``make site``, tools/build_site.py) built into a temporary folder and opened in Chromium.

Served by a local http.server on 127.0.0.1, every request that is not for that server is
recorded and aborted. Every page must then load with no such attempt and no console error.
A notebook's page must show its title, its figures and its live widgets, render its maths,
keep every exercise's solution folded (its code and its output, the answer, hidden until the
fold is opened) and link to the next notebook; the landing page names every part of the
series that has a notebook; on notebook 08's page hovering and pinning a token changes the
explorer. The other pages of ``site/`` (installing, tests, widgets, ...) load the same way.
One page is also opened from ``file://``. A screenshot of each page goes to ``test-artifacts/``.
"""
from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import statistics
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .helpers import ROOT

pytestmark = [pytest.mark.browser,  # the pinned themes still use an app attribute that Sphinx 11 will remove:
              pytest.mark.filterwarnings("ignore:.*Check CHANGES for Sphinx API modifications")]

EXPORT_MIME = "application/vnd.attnlib.widget+json"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DOC_PAGES = sorted(p.stem for p in (ROOT / "site").glob("*.md") if p.stem != "index")  # installing, tests, ...
SOLUTION = "# Solution"  # how an exercise's solution cell starts
FIRST_RENDER_MS = 1000  # the budget for a page's first contentful paint (median of LOADS loads)
LOADS = 3  # the first load (empty cache for the first page) and two reloads: one load alone is noisy on a shared machine
BUILD_SECONDS = 120  # the budget for building the site
PAGE_MAX_BYTES = 10_000_000  # a page with its own images and widget pages (shared theme/MathJax files not counted)
TIMINGS: dict[str, float] = {}


def load_builder():
    spec = importlib.util.spec_from_file_location("build_site", ROOT / "tools" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected(nb_path: Path) -> dict:
    """What the notebook's page must show: its title, pictures (outputs with a PNG, not live) and live frames."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    title = next(line[2:].strip() for line in "".join(nb["cells"][0]["source"]).splitlines() if line.startswith("# "))
    pictures = frames = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if EXPORT_MIME in data:
                frames += len(data[EXPORT_MIME]["compare"]) if "compare" in data[EXPORT_MIME] else 1
            elif "image/png" in data:
                pictures += 1
    maths = sum("".join(c["source"]).count("$") for c in nb["cells"] if c["cell_type"] == "markdown") > 0
    hidden = sum(1 for c in nb["cells"] if c["metadata"].get("jupyter", {}).get("source_hidden"))
    solutions = sum(1 for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).startswith(SOLUTION))
    return {"title": title, "pictures": pictures, "frames": frames, "maths": maths, "hidden": hidden,
            "solutions": solutions}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    builder = load_builder()
    t0 = time.perf_counter()
    report = builder.build(out)
    TIMINGS["build_s"] = time.perf_counter() - t0
    sizes = {p.relative_to(out).as_posix(): builder.page_bytes(p, out) for p in out.rglob("*.html")}
    print(f"\nsite built in {TIMINGS['build_s']:.1f} s; largest page {max(sizes.values()) / 1e6:.2f} MB "
          f"({max(sizes, key=sizes.get)})")
    return out, report, sizes


@pytest.fixture(scope="module")
def server(site):
    out = site[0]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(out)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def open_guarded(context, url: str, allowed: str):
    """Open ``url``; every request not starting with ``allowed`` is recorded and aborted; errors are collected."""
    page = context.new_page()
    attempted, errors = [], []

    def guard(route):
        if route.request.url.startswith(allowed):
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.goto(url, wait_until="load")
    return page, attempted, errors


def first_paint_ms(page) -> float:
    return page.evaluate("""() => new Promise((resolve) => {
      const get = () => performance.getEntriesByName('first-contentful-paint')[0];
      if (get()) return resolve(get().startTime);
      new PerformanceObserver(() => get() && resolve(get().startTime)).observe({ type: 'paint', buffered: true });
    })""")


def check_maths(page) -> int:
    """Wait for MathJax; every math span/div must hold a rendered mjx-container. Returns their number."""
    page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20_000)
    page.evaluate("MathJax.startup.promise")
    counts = page.evaluate("""() => { const all = [...document.querySelectorAll('.math')];
      return [all.length, all.filter((m) => m.querySelector('mjx-container')).length]; }""")
    assert counts[0] > 0 and counts[0] == counts[1], f"maths not rendered: {counts[1]} of {counts[0]} formulas"
    return counts[0]


def check_frames(page, n: int) -> None:
    """Every live widget frame shows a rendered widget (its attn-root) and has been sized to it."""
    frames = page.locator("iframe.attnlib-frame")
    assert frames.count() == n, f"{frames.count()} widget frames, expected {n}"
    for i in range(n):
        frame = frames.nth(i)
        frame.scroll_into_view_if_needed()
        root = frame.content_frame.locator("[data-testid=attn-root]")
        root.wait_for(state="visible")
        assert root.get_attribute("data-render-ms") is not None
        # the frame was fitted to the widget (the page reported its height): nothing cut off
        inner = frame.content_frame.locator("body").evaluate("b => b.getBoundingClientRect().bottom")
        assert frame.bounding_box()["height"] >= inner, (i, frame.bounding_box(), inner)


def check_solutions(page, n: int) -> None:
    """Every exercise's solution is folded, code and output together: none of it is visible (the answer is not on
    screen) until the reader opens its fold, and then all of it is, with the check saying "correct"."""
    where = page.evaluate("""(mark) => [...document.querySelectorAll('div.cell')].flatMap((cell, i) => {
      const code = cell.querySelector('.cell_input');
      return code && code.textContent.trimStart().startsWith(mark) ? [i] : [];
    })""", SOLUTION)
    assert len(where) == n, f"{len(where)} solution cells on the page, the notebook has {n}"
    for k, i in enumerate(where):
        cell = page.locator("div.cell").nth(i)
        code, output = cell.locator(".cell_input"), cell.locator(".cell_output")
        assert output.count() == 1, f"solution {k + 1}: {output.count()} output areas"
        folds = cell.locator("details.hide")
        assert folds.count() >= 1 and all(folds.nth(j).get_attribute("open") is None for j in range(folds.count())), \
            f"solution {k + 1}: not folded, or its fold is open before a click"
        cell.scroll_into_view_if_needed()
        assert not code.is_visible(), f"solution {k + 1}: its code is on screen before the fold is opened"
        assert not output.is_visible(), \
            f"solution {k + 1}: its output (the answer) is on screen before the fold is opened"
        for j in range(folds.count()):  # one fold (hide-cell) holds both; opening it shows the answer
            folds.nth(j).locator("summary").first.click()
        expect(code).to_be_visible()
        expect(output).to_be_visible()
        assert "correct" in output.inner_text(), f"solution {k + 1}: its opened output does not say 'correct'"


def check_images(page) -> int:
    page.wait_for_function("[...document.images].every((i) => i.complete)")
    broken = page.evaluate("[...document.images].filter((i) => !i.naturalWidth).map((i) => i.src)")
    assert broken == [], f"images that did not load: {broken}"
    return page.evaluate("document.querySelectorAll('article img').length")


def test_site_builds_within_budget(site):
    out, report, sizes = site
    assert (out / "index.html").is_file() and (out / ".nojekyll").is_file()
    assert TIMINGS["build_s"] <= BUILD_SECONDS, f"build took {TIMINGS['build_s']:.1f} s"
    big = {p: s for p, s in sizes.items() if s >= PAGE_MAX_BYTES}
    assert big == {}, f"pages of 10 MB or more: {big}"
    for nb in NOTEBOOKS:  # every output that carries the export became a live widget
        got = report["notebooks"][nb.stem]
        exports = sum(1 for c in json.loads(nb.read_text())["cells"] for o in c.get("outputs", [])
                      if EXPORT_MIME in o.get("data", {}))
        assert got["live"] == exports, (nb.stem, got, exports)


@pytest.mark.parametrize("name", ["index", "search", "genindex"] + DOC_PAGES + [f"notebooks/{p.stem}" for p in NOTEBOOKS])
def test_page_offline(browser_context, server, site, artifacts, name):
    page, attempted, errors = open_guarded(browser_context, f"{server}/{name}.html", server + "/")
    try:
        paints = [first_paint_ms(page)]
        title = page.title()
        assert title.strip(), "the page has no title"
        if name.startswith("notebooks/"):
            want = expected(ROOT / f"{name}.ipynb")
            assert title.startswith(want["title"]), (title, want["title"])
            assert page.locator("article h1").first.inner_text().strip().rstrip("#").strip() == want["title"]
            folded = page.locator("details.hide.above-input:not([open])")  # cells whose code Jupyter folds
            assert folded.count() == want["hidden"], f"{folded.count()} folded cells, the notebook hides {want['hidden']}"
            check_solutions(page, want["solutions"])  # opens them: a widget in a solution's output is then visible
            shown = check_images(page)
            assert shown >= want["pictures"], f"{shown} figures on the page, the notebook has {want['pictures']}"
            check_frames(page, want["frames"])
            if want["maths"]:
                check_maths(page)
            nxt = NOTEBOOKS.index(ROOT / f"{name}.ipynb") + 1
            if nxt < len(NOTEBOOKS):  # navigation: a link to the next notebook
                href = page.get_attribute("a.right-next", "href")
                assert href and href.split("#")[0] == f"{NOTEBOOKS[nxt].stem}.html", href
        elif name == "index":
            for nb in NOTEBOOKS:  # the map links every notebook
                assert page.locator(f"article a[href='notebooks/{nb.stem}.html']").count() >= 1, nb.stem
            builder = load_builder()  # the parts of the series: navigation names each one that has a notebook
            parts = {caption for _, _, caption, _ in builder.PARTS}
            want_parts = {builder.PARTS[builder.part_of(nb)][2] for nb in NOTEBOOKS}
            captions = set(page.locator(".caption-text").all_inner_texts())
            assert captions & parts == want_parts, f"navigation names the parts {captions & parts}, expected {want_parts}"
            for doc in DOC_PAGES:  # and the pages about working with the series
                assert page.locator(f"a[href='{doc}.html']").count() >= 1, doc
        page.screenshot(path=str(artifacts / f"site_{name.replace('/', '_')}.png"))
        for _ in range(LOADS - 1):
            page.reload(wait_until="load")
            paints.append(first_paint_ms(page))
    finally:
        page.close()
    ms = statistics.median(paints)
    TIMINGS[name] = ms
    print(f"\n{name}: first contentful paint {ms:.0f} ms (median of {', '.join(f'{p:.0f}' for p in paints)})")
    assert attempted == [], f"requests that left localhost: {attempted}"
    assert errors == [], f"errors on {name}: {errors}"
    assert ms < FIRST_RENDER_MS, f"{name}: first render {ms:.0f} ms (median of {paints})"


def test_search_finds_a_word(browser_context, server):
    page, attempted, errors = open_guarded(browser_context, f"{server}/search.html?q=softmax", server + "/")
    try:
        page.wait_for_selector("#search-results ul.search li", timeout=20_000)
        hits = page.locator("#search-results ul.search li").count()
        assert hits >= 3, f"'softmax' found on {hits} pages"
    finally:
        page.close()
    assert attempted == [] and errors == [], (attempted, errors)


def explore(page, frame_selector: str) -> None:
    """Hover, pin, head and layer switches in the explorer of ``frame_selector``; each must change its root."""
    frame = page.frame_locator(frame_selector)
    root = frame.locator("[data-testid=attn-root]")
    root.wait_for(state="visible")
    page.locator(frame_selector).scroll_into_view_if_needed()
    assert root.get_attribute("data-active-row") in (None, "", "-1")
    frame.locator("[data-testid=query-token-3]").hover()
    assert root.get_attribute("data-active-row") == "3"
    readout = frame.locator("[data-testid=readout]").inner_text()
    assert "→" in readout or "->" in readout, readout
    frame.locator("[data-testid=query-token-3]").click()
    assert root.get_attribute("data-selected") == "3"
    frame.locator("[data-testid=head-select]").select_option("2")
    assert root.get_attribute("data-head") == "2" and root.get_attribute("data-selected") == "3"
    frame.locator("[data-testid=layer-select]").select_option("1")
    assert root.get_attribute("data-layer") == "1"


def test_notebook_08_explorer_is_live(browser_context, server, artifacts):
    page, attempted, errors = open_guarded(browser_context, f"{server}/notebooks/08_attention_explorer.html", server + "/")
    try:
        explore(page, "iframe.attnlib-frame >> nth=0")
        page.screenshot(path=str(artifacts / "site_08_explorer_pinned.png"))
        # the compare output: three frames, linked like traitlets.link in Jupyter
        group = page.locator(".attnlib-live[data-frames='3']")
        assert group.count() == 1
        frames = group.locator("iframe.attnlib-frame")
        first = page.frame_locator(".attnlib-live[data-frames='3'] iframe >> nth=0")
        first.locator("[data-testid=query-token-5]").click()
        first.locator("[data-testid=head-select]").select_option("3")
        for k in range(3):  # the other two follow through postMessage (asynchronous: expect() polls)
            root = page.frame_locator(f".attnlib-live[data-frames='3'] iframe >> nth={k}").locator("[data-testid=attn-root]")
            expect(root).to_have_attribute("data-selected", "5")
            expect(root).to_have_attribute("data-head", "3")
        assert frames.count() == 3
    finally:
        page.close()
    assert attempted == [], f"requests that left localhost: {attempted}"
    assert errors == [], errors


def test_notebook_08_from_file_url(browser_context, site):
    out = site[0]
    url = (out / "notebooks" / "08_attention_explorer.html").as_uri()
    page, attempted, errors = open_guarded(browser_context, url, "file://")
    try:
        explore(page, "iframe.attnlib-frame >> nth=0")
        page.goto((out / "notebooks" / "02_bahdanau_attention.html").as_uri(), wait_until="load")
        check_maths(page)
        check_images(page)
    finally:
        page.close()
    assert attempted == [], f"requests that left the files: {attempted}"
    assert errors == [], errors


@pytest.fixture(scope="module", autouse=True)
def report_timings(artifacts):
    """Print the first render of every page and the build time, and save them to test-artifacts/site_timings.json."""
    yield
    pages = {k: v for k, v in TIMINGS.items() if k != "build_s"}
    (artifacts / "site_timings.json").write_text(json.dumps(TIMINGS, indent=2) + "\n")
    if pages:
        worst = max(pages, key=pages.get)
        print(f"\nsite: first contentful paint over {len(pages)} pages: median "
              f"{sorted(pages.values())[len(pages) // 2]:.0f} ms, slowest {worst} {pages[worst]:.0f} ms; "
              f"build {TIMINGS.get('build_s', float('nan')):.1f} s")
