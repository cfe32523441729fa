"""End to end: JupyterLab 4 and Notebook 7, in Chromium, run notebook 08 and drive its AttentionExplorer.

The same test runs once in each front end (``frontend`` is ``lab`` or ``notebook``): the
widget's claim is that it works in both, so both are driven. (VS Code has no headless
front end to drive here; it renders anywidget through the same widget manager protocol.)

CONTRACT with notebooks/08_attention_explorer.ipynb (keep it when editing the notebook):

1. The notebook has ``metadata.kernelspec`` (python3) and runs top to bottom with
   "Run All" from a copy placed in ``<tmp>/notebooks/`` (``<tmp>/data`` is a symlink to the
   repository's ``data/``, so ``../data/...`` paths work).
2. At least one ``AttentionExplorer`` is displayed as a cell output. The test drives the
   FIRST one on the page (``[data-testid=attn-root][data-kind=explorer]``). It needs at
   least 2 query tokens and 2 heads, and head 0 and head 1 of the layer it shows first
   must not draw identical maps.
3. One code cell contains the text ``E2E_CHECK_SELECTED`` (a comment is fine) and prints
   the state of THAT SAME explorer as one line:
   ``print(f"selected={explorer.selected} layer={explorer.layer} head={explorer.head}")``
   After "Run All" it prints ``selected=None ...`` (nothing pinned yet).
4. The notebook is stored executed (as every notebook of the series): before anything
   runs, the stored explorer output shows the widget's static preview (its text contains
   "Static preview"), because stored outputs are untrusted in a fresh JupyterLab.

What the test does: checks the static preview; clears the outputs and runs all cells;
waits for the explorer and the checker's output; hovers ``query-token-1`` and checks that
the highlighted row (``data-active-row``), the overlay and the key chips' weights changed;
clicks it (pins); switches ``head-select`` to another head and checks that the map canvas
changed; re-runs the checker cell with Ctrl+Enter and checks that Python printed
``selected=1`` and the new head; saves screenshots to
``test-artifacts/explorer_e2e_{frontend}_*.png``.

Three more tests write their own small notebooks into the server's folder: a big explorer whose maps the
kernel sends on demand, the compare view, and an explorer of SmolLM2's shape (30 layers x 9 heads, random
weights with a first-token sink: hover, pin, switch layer from the menu and the scrolling grid, clip the sink).

The server (``python -m jupyterlab`` or ``python -m notebook``) runs on 127.0.0.1 with a free
port, a random token and its own config, runtime, settings and workspaces directories,
wrapped in ``timeout``; it is stopped with POST /api/shutdown, then by killing its own
process group.

Budgets: every wait of the test has its own timeout, and pytest-timeout's kill
(``E2E_TIMEOUT_S``) comes only after all of them could have run out, so a slow step fails
with its own message (``test_the_kill_comes_after_every_wait`` checks the sum). Whatever the
outcome, even after the kill, the server log is copied to ``test-artifacts/`` and a failure
leaves a screenshot there.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import LAUNCH_TIMEOUT_MS
from .helpers import ROOT

pytestmark = pytest.mark.browser

NOTEBOOK = "08_attention_explorer.ipynb"
CHECK_MARKER = "E2E_CHECK_SELECTED"
EXPLORER = "[data-testid=attn-root][data-kind=explorer] >> nth=0"
SERVER_START_S = 60  # the fixture waits this long for the server to answer
SERVER_STOP_S = 25  # POST /api/shutdown (15 s), then SIGTERM (5 s), then SIGKILL (5 s)
ACTION_MS = 10_000  # the page's default timeout: every Playwright call of the test without its own timeout
ARTIFACT_MS = 10_000  # the failure screenshot
E2E_TIMEOUT_S = 840  # pytest-timeout's kill: after every wait below has run out (worst case 790 s; checked below)
FRONTENDS = {  # module to run, its flag that sets window.jupyterapp, the notebook's URL path
    "lab": ("jupyterlab", "--LabApp.expose_app_in_browser=True", f"/lab/tree/notebooks/{NOTEBOOK}?reset&"),
    "notebook": ("notebook", "--JupyterNotebookApp.expose_app_in_browser=True", f"/notebooks/notebooks/{NOTEBOOK}?"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, token: str, path: str, method: str = "GET") -> int:
    req = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as response:
        return response.status


@pytest.fixture(scope="module", params=sorted(FRONTENDS))
def jupyter(request, chromium_executable, tmp_path_factory, artifacts):
    """A JupyterLab or Notebook 7 server with a copy of the notebook; yields (frontend, base_url, token, log path)."""
    frontend = request.param
    module, expose_flag, _ = FRONTENDS[frontend]
    tmp = tmp_path_factory.mktemp(frontend)
    (tmp / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, tmp / "notebooks" / NOTEBOOK)
    (tmp / "data").symlink_to(ROOT / "data", target_is_directory=True)
    env = dict(os.environ)
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR",
                "JUPYTERLAB_SETTINGS_DIR", "JUPYTERLAB_WORKSPACES_DIR"):
        env[var] = str(tmp / "jupyter" / var.lower())
        Path(env[var]).mkdir(parents=True)
    notification = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)  # no news toast over the notebook
    (notification / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    tracker = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)  # attach every cell: the default windowing skips cells out of view, so a long
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))  # notebook's outputs are not in the DOM
    port, token = free_port(), secrets.token_hex(16)
    log = tmp / f"{module}.log"
    # `timeout` kills the server even if this process dies first; it lives as long as every test it serves may take.
    # (macOS has it only as Homebrew coreutils' gtimeout; without either, the finally below still stops the server.)
    serves = [i for i in request.session.items if i.path == request.path and "jupyter" in i.fixturenames]
    lifetime_s = sum(next((m.args[0] for m in i.iter_markers("timeout")), E2E_TIMEOUT_S) for i in serves) \
        + SERVER_START_S + SERVER_STOP_S
    timeout_cmd = (shutil.which("timeout") or shutil.which("gtimeout")) if os.name == "posix" else None  # Windows: a pause
    wrapper = [timeout_cmd, str(lifetime_s)] if timeout_cmd else []
    cmd = [*wrapper, sys.executable, "-m", module, "--no-browser",
           "--ip=127.0.0.1", f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
           expose_flag, "--allow-root", f"--ServerApp.root_dir={tmp}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{module} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if api(base, token, "/api/status") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{module} did not answer within {SERVER_START_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield frontend, base, token, log
    finally:
        try:
            api(base, token, "/api/shutdown", method="POST")
            proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # only the group we started (timeout + jupyter)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        shutil.copy(log, artifacts / f"explorer_e2e_{frontend}_server.log")  # the whole log, whatever happened


KERNEL_IDLE = """(name) => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const kernel = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!kernel && w.context.path.endsWith(name) && kernel.connectionStatus === 'connected'
        && kernel.status === 'idle';
}"""

ALL_RAN = """() => window.jupyterapp.shell.currentWidget.content.widgets
    .every((c) => c.model.type !== 'code' || c.model.executionCount !== null)"""

MARK_CHECKER = """(marker) => {
    const cells = window.jupyterapp.shell.currentWidget.content.widgets;
    const i = cells.findIndex((c) => c.model.type === 'code' && c.model.sharedModel.getSource().includes(marker));
    if (i >= 0) cells[i].node.setAttribute('data-e2e', 'checker');
    return i;
}"""

CANVAS_SUM = """(root, testid) => {
    const c = root.querySelector(`[data-testid=${testid}]`);
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let s = 0; for (let p = 0; p < d.length; p++) s += d[p] * ((p % 251) + 1); return s;
}"""


# Errors the front end throws by itself. Notebook 7.6.5 throws this one from its own settings
# registry whenever it opens a notebook, an empty one without any widget included; it is
# matched by its message AND by the top stack frame lying in Notebook's core bundle, so an
# error of the widget is never excused.
KNOWN_FRONTEND_ERRORS = {
    "notebook": [("Cannot read properties of undefined (reading 'schema')", "/static/notebook/notebook_core.")],
}


def is_known_frontend_error(frontend: str, error) -> bool:
    frames = [line.strip() for line in (error.stack or "").splitlines() if line.strip().startswith("at ")]
    return any(error.message == message and frames and bundle in frames[0]
               for message, bundle in KNOWN_FRONTEND_ERRORS.get(frontend, []))


def checker_output(page) -> str:
    return page.locator("[data-e2e=checker] .jp-OutputArea-output").all_inner_texts()


def save_failure_artifacts(page, log: Path, artifacts: Path, prefix: str) -> None:
    """The server log so far and a screenshot; never raises, so the test's own error is what is reported."""
    try:
        shutil.copy(log, artifacts / f"{prefix}_server.log")
        page.screenshot(path=str(artifacts / f"{prefix}_failure.png"), timeout=ARTIFACT_MS)
    except Exception as error:  # a dead page must not hide why the test failed
        print(f"could not save every failure artefact of {prefix}: {error!r}", file=sys.stderr)


@pytest.mark.timeout(E2E_TIMEOUT_S)
def test_explorer_in_jupyter(jupyter, browser_context, artifacts):
    frontend, base, token, log = jupyter
    t_start = time.monotonic()
    page = browser_context.new_page()
    page.set_default_timeout(ACTION_MS)
    page_errors: list[str] = []
    known_errors: list[str] = []

    def on_page_error(error):
        (known_errors if is_known_frontend_error(frontend, error) else page_errors).append(str(error))

    page.on("pageerror", on_page_error)
    try:
        page.goto(f"{base}{FRONTENDS[frontend][2]}token={token}", timeout=60_000)
        # The toolbar can say idle before the kernel is connected: ask the session itself.
        page.wait_for_function(KERNEL_IDLE, arg=NOTEBOOK, timeout=60_000)
        # Stored outputs are untrusted here (fresh trust database), so the front end renders the
        # widget's static text/html preview: never an empty box.
        page.wait_for_function("() => [...document.querySelectorAll('.jp-OutputArea-output')]"
                               ".some((o) => o.innerText.includes('Static preview'))", timeout=15_000)
        checker = page.evaluate(MARK_CHECKER, CHECK_MARKER)
        assert checker >= 0, f"no code cell of {NOTEBOOK} contains {CHECK_MARKER!r} (see the contract above)"
        # Fire and forget: awaiting run-all inside evaluate can hang.
        page.evaluate("""async () => {
            await window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs');
            window.jupyterapp.commands.execute('notebook:run-all-cells');
        }""")
        explorer = page.locator(EXPLORER)
        explorer.wait_for(state="visible", timeout=90_000)
        page.wait_for_function("() => /selected=None/.test(document.querySelector('[data-e2e=checker] .jp-OutputArea')"
                               "?.innerText || '')", timeout=60_000)
        # Idle between two cells is not the end of "Run All": wait until every code cell has run, else the
        # widget's updates queue behind the remaining cells and reach the kernel after the checker re-runs.
        page.wait_for_function(ALL_RAN, timeout=90_000)
        page.wait_for_function(KERNEL_IDLE, arg=NOTEBOOK, timeout=30_000)
        t_ran = time.monotonic()
        explorer.scroll_into_view_if_needed()
        n_heads = explorer.locator("[data-testid=head-select] option").count()
        assert explorer.locator("[data-testid=query-token-1]").count() == 1 and n_heads >= 2, \
            "the first explorer needs >= 2 query tokens and >= 2 heads (see the contract above)"

        # Hover: the highlighted row, the overlay and the key chips change, with no kernel round trip.
        assert explorer.get_attribute("data-active-row") == ""
        overlay_before = explorer.evaluate(CANVAS_SUM, "heatmap-overlay")
        explorer.locator("[data-testid=query-token-1]").hover()
        assert explorer.get_attribute("data-active-row") == "1"
        assert explorer.evaluate(CANVAS_SUM, "heatmap-overlay") != overlay_before
        weight = explorer.locator("[data-testid=key-token-0]").get_attribute("data-weight")
        assert weight is not None and re.fullmatch(r"\d\.\d{3}", weight)

        # Click pins; switching heads redraws the map and keeps the pin.
        explorer.locator("[data-testid=query-token-1]").click()
        assert explorer.get_attribute("data-selected") == "1"
        assert explorer.locator("[data-testid=pinned-marker]").is_visible()
        map_before = explorer.evaluate(CANVAS_SUM, "heatmap-canvas")
        new_head = 1 if explorer.get_attribute("data-head") != "1" else 0
        explorer.locator("[data-testid=head-select]").select_option(str(new_head))
        assert explorer.get_attribute("data-head") == str(new_head)
        assert explorer.evaluate(CANVAS_SUM, "heatmap-canvas") != map_before, "switching heads did not change the map"
        assert explorer.get_attribute("data-selected") == "1"

        # The kernel sees the pin and the head: re-run the checker cell with Ctrl+Enter.
        page.locator("[data-e2e=checker] .jp-InputPrompt").click()
        page.keyboard.press("Control+Enter")
        expected = re.compile(rf"selected=1 layer=\d+ head={new_head}\b")
        page.wait_for_function("(pattern) => new RegExp(pattern).test(document.querySelector("
                               "'[data-e2e=checker] .jp-OutputArea')?.innerText || '')",
                               arg=expected.pattern, timeout=30_000)
        assert any(expected.search(text) for text in checker_output(page))

        explorer.scroll_into_view_if_needed()
        explorer.screenshot(path=str(artifacts / f"explorer_e2e_{frontend}_widget.png"))
        page.screenshot(path=str(artifacts / f"explorer_e2e_{frontend}_page.png"))
        timings = {"frontend": frontend, "open_and_run_all_s": round(t_ran - t_start, 1),
                   "interact_s": round(time.monotonic() - t_ran, 1), "render_ms": explorer.get_attribute("data-render-ms"),
                   "known_frontend_errors_ignored": known_errors}
        (artifacts / f"explorer_e2e_{frontend}_timings.json").write_text(json.dumps(timings, indent=2) + "\n")
        print("\ne2e timings:", timings)
        assert page_errors == [], f"uncaught errors in the page: {page_errors}"
    except BaseException:  # BaseException: pytest-timeout's kill raises pytest.fail's Failed, not an Exception
        save_failure_artifacts(page, log, artifacts, f"explorer_e2e_{frontend}")
        raise
    finally:
        page.close()


# Playwright calls that can wait; each waits its own ``timeout=`` or else the page default (ACTION_MS).
WAITING_CALLS = {"goto", "wait_for_function", "wait_for", "wait_for_selector", "hover", "click", "dblclick",
                 "fill", "press", "get_attribute", "select_option", "screenshot", "scroll_into_view_if_needed",
                 "evaluate", "inner_text", "text_content", "check", "uncheck"}


def waits_in(function) -> float:
    """Seconds that the Playwright waits of ``function`` can take, and those of this module's functions it calls."""
    waits = 0.0
    for node in ast.walk(ast.parse(inspect.getsource(function).lstrip())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WAITING_CALLS:
            given = {k.arg: k.value for k in node.keywords}
            ms = eval(compile(ast.Expression(given["timeout"]), "<timeout>", "eval"), globals()) if "timeout" in given \
                else ACTION_MS
            waits += ms / 1000
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != function.__name__:
            helper = globals().get(node.func.id)
            if inspect.isfunction(helper) and helper.__module__ == __name__:
                waits += waits_in(helper)
    return waits


def worst_case_seconds(test) -> float:
    """The longest ``test`` can take before a wait of its own times out: setup, every wait, teardown, artefacts."""
    setup = SERVER_START_S + LAUNCH_TIMEOUT_MS / 1000  # the module's server and browser start in its first test
    return setup + waits_in(test) + ARTIFACT_MS / 1000 + SERVER_STOP_S


@pytest.mark.parametrize("name", ["test_explorer_in_jupyter", "test_a_big_explorer_gets_its_maps_from_the_kernel",
                                  "test_compare_views_follow_each_other_through_the_kernel",
                                  "test_a_30_by_9_explorer_in_jupyter"])
def test_the_kill_comes_after_every_wait(name):
    """If pytest-timeout killed a test before its own waits ran out, a slow step would be reported as a bare
    timeout; this fails when a wait is added or lengthened without raising the test's timeout."""
    test = globals()[name]
    worst = worst_case_seconds(test)
    kill = next(m.args[0] for m in test.pytestmark if m.name == "timeout")
    assert kill > worst, f"pytest-timeout kills {name} after {kill} s, but its waits can take {worst:.0f} s"


def write_notebook(log: Path, name: str, *sources: str) -> None:
    """A notebook of these code cells, with a kernelspec, in the server's folder (the folder of its log)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, log.parent / "notebooks" / name)


def new_page(browser_context, frontend: str):
    """A page with the tests' default timeout, and the list its uncaught errors go to (the front end's own aside)."""
    page = browser_context.new_page()
    page.set_default_timeout(ACTION_MS)
    page_errors: list[str] = []
    page.on("pageerror", lambda e: None if is_known_frontend_error(frontend, e) else page_errors.append(str(e)))
    return page, page_errors


@contextlib.contextmanager
def closing_with_artifacts(page, log: Path, artifacts: Path, prefix: str):
    """Close ``page`` at the end; on any failure (pytest-timeout's kill included) first save the artefacts."""
    try:
        yield page
    except BaseException:
        save_failure_artifacts(page, log, artifacts, prefix)
        raise
    finally:
        page.close()


def open_and_run_all(page, jupyter, name: str) -> None:
    """Open notebook ``name``, wait for its kernel, run every cell, and wait until all ran and the kernel is idle."""
    frontend, base, token, _ = jupyter
    page.goto(f"{base}{FRONTENDS[frontend][2].replace(NOTEBOOK, name)}token={token}", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE, arg=name, timeout=60_000)  # fire and forget: awaiting run-all can hang
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.locator(EXPLORER).wait_for(state="visible", timeout=90_000)
    page.wait_for_function(ALL_RAN, timeout=90_000)
    page.wait_for_function(KERNEL_IDLE, arg=name, timeout=30_000)


BIG_NOTEBOOK = "big_explorer.ipynb"
BIG_SOURCE = """import torch
from attnlib import AttentionExplorer

g = torch.Generator().manual_seed(0)
w = torch.softmax(2 * torch.randn(6, 12, 300, 300, generator=g), dim=-1)  # 26 MB of float32: maps on demand
big = AttentionExplorer(w, [f"t{i}" for i in range(300)])
big"""


@pytest.mark.timeout(560)  # after every wait below (worst case 545 s; checked above)
def test_a_big_explorer_gets_its_maps_from_the_kernel(jupyter, browser_context, artifacts):
    """A big explorer in a live kernel: a click on a thumbnail makes the kernel send that exact map."""
    import torch

    frontend, base, token, log = jupyter
    write_notebook(log, BIG_NOTEBOOK, BIG_SOURCE)
    w = torch.softmax(2 * torch.randn(6, 12, 300, 300, generator=torch.Generator().manual_seed(0)), dim=-1)
    page, page_errors = new_page(browser_context, frontend)
    with closing_with_artifacts(page, log, artifacts, f"explorer_e2e_{frontend}_big"):
        open_and_run_all(page, jupyter, BIG_NOTEBOOK)
        explorer = page.locator(EXPLORER)
        explorer.locator("[data-testid=thumb-3-4]").click()
        page.wait_for_function("() => { const r = document.querySelector('[data-testid=attn-root][data-kind=explorer]');"
                               " return r.dataset.head === '4' && r.dataset.loading === ''; }", timeout=30_000)
        explorer.locator("[data-testid=query-token-9]").hover()
        best = int(w[3, 4, 9].argmax())
        assert explorer.locator("[data-testid=readout]").inner_text(timeout=ACTION_MS) == \
            f"t9 → t{best}: {w[3, 4, 9, best].item():.3f} (largest weight)"
        explorer.screenshot(path=str(artifacts / f"explorer_e2e_{frontend}_big.png"))
        assert page_errors == [], f"uncaught errors in the page: {page_errors}"


COMPARE_NOTEBOOK = "compare_views.ipynb"
COMPARE_SOURCE = """import torch
from attnlib.viz.compare import compare

g = torch.Generator().manual_seed(0)
a, b = (torch.softmax(2 * torch.randn(2, 3, 8, 8, generator=g), dim=-1) for _ in range(2))
view = compare(a, b, [f"t{i}" for i in range(8)], names=("A", "B"))
view"""

ALL_THREE = """([name, value]) => {
    const roots = [...document.querySelectorAll('[data-testid=attn-root][data-kind=explorer]')];
    return roots.length === 3 && roots.every((r) => r.dataset[name] === value);
}"""


@pytest.mark.timeout(720)  # after every wait below (worst case 680 s; checked above)
def test_compare_views_follow_each_other_through_the_kernel(jupyter, browser_context, artifacts):
    """compare(): a head opened, a token pinned or the view switched in any of the three views reaches the other two
    (the links live in the kernel), and a scale picked in A's menu is B's too, with the same numbers on the colour bar."""
    frontend, base, token, log = jupyter
    write_notebook(log, COMPARE_NOTEBOOK, COMPARE_SOURCE)
    page, page_errors = new_page(browser_context, frontend)
    views = [page.locator(f"[data-testid=attn-root][data-kind=explorer] >> nth={k}") for k in range(3)]
    with closing_with_artifacts(page, log, artifacts, f"explorer_e2e_{frontend}_compare"):
        open_and_run_all(page, jupyter, COMPARE_NOTEBOOK)
        views[2].wait_for(state="visible")  # the first explorer is up; the other two come in the same output
        assert [v.locator("[data-testid=title]").inner_text() for v in views] == ["A", "B", "A minus B"]

        views[0].locator("[data-testid=thumb-1-2]").click()  # a head opened in A
        page.wait_for_function(ALL_THREE, arg=["head", "2"], timeout=15_000)
        page.wait_for_function(ALL_THREE, arg=["layer", "1"], timeout=15_000)
        views[1].locator("[data-testid=query-token-3]").click()  # a query pinned in B
        page.wait_for_function(ALL_THREE, arg=["selected", "3"], timeout=15_000)

        assert views[0].get_attribute("data-scale") == "fixed"
        views[0].locator("[data-testid=scale-select]").select_option("map")  # A's menu: B follows, the difference not
        page.wait_for_function("() => document.querySelectorAll('[data-testid=attn-root][data-kind=explorer]')[1]"
                               ".dataset.scale === 'map'", timeout=15_000)
        bars = [v.locator("[data-testid=colorbar]") for v in views]
        assert bars[0].get_attribute("data-vmax") == bars[1].get_attribute("data-vmax")  # one scale for A and B
        assert views[2].get_attribute("data-scale") == "model"
        assert float(bars[2].get_attribute("data-vmin")) == -float(bars[2].get_attribute("data-vmax"))

        views[2].locator("[data-testid=view-select]").select_option("lines")  # the difference's menu
        page.wait_for_function(ALL_THREE, arg=["view", "lines"], timeout=15_000)
        page.screenshot(path=str(artifacts / f"explorer_e2e_{frontend}_compare.png"), full_page=True)
        assert page_errors == [], f"uncaught errors in the page: {page_errors}"


SMOL_NOTEBOOK = "explorer_30x9.ipynb"
SMOL_MARKER = "SMOL_CHECK"
SMOL_SOURCE = """import torch
from attnlib import AttentionExplorer

g = torch.Generator().manual_seed(0)
n = 40
allowed = torch.ones(n, n, dtype=torch.bool).tril()
w = torch.softmax((2 * torch.randn(30, 9, n, n, generator=g)).masked_fill(~allowed, -1e9), -1)  # SmolLM2's 30 x 9 heads
share = 0.5 + 0.4 * torch.rand(27, 9, 1, 1, generator=g)  # from layer 3 on, a first-token sink of 0.5-0.9
w[3:] = w[3:] * (1 - share)
w[3:, :, :, 0] += share[..., 0]
smol = AttentionExplorer(w, [f"t{i}" for i in range(n)], mask=allowed, title="30 x 9")
smol"""
SMOL_CHECK = f"""# {SMOL_MARKER}
print(f"layer={{smol.layer}} head={{smol.head}} selected={{smol.selected}} clip_sink={{smol.clip_sink}}")"""


def smol_weights():
    """The weights SMOL_SOURCE builds, computed here too (the same seed and steps)."""
    import torch

    g, n = torch.Generator().manual_seed(0), 40
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax((2 * torch.randn(30, 9, n, n, generator=g)).masked_fill(~allowed, -1e9), -1)
    share = 0.5 + 0.4 * torch.rand(27, 9, 1, 1, generator=g)
    w[3:] = w[3:] * (1 - share)
    w[3:, :, :, 0] += share[..., 0]
    return w


@pytest.mark.timeout(760)  # after every wait below (worst case 715 s; checked above)
def test_a_30_by_9_explorer_in_jupyter(jupyter, browser_context, artifacts):
    """SmolLM2's shape (30 layers x 9 heads, 40 tokens, a first-token sink) in a live kernel: hover, pin, switch
    layer from the menu and from the scrolling grid, clip the sink; the kernel sees every choice."""
    frontend, base, token, log = jupyter
    write_notebook(log, SMOL_NOTEBOOK, SMOL_SOURCE, SMOL_CHECK)
    w = smol_weights()
    page, page_errors = new_page(browser_context, frontend)
    with closing_with_artifacts(page, log, artifacts, f"explorer_e2e_{frontend}_30x9"):
        open_and_run_all(page, jupyter, SMOL_NOTEBOOK)
        explorer = page.locator(EXPLORER)
        assert page.evaluate(MARK_CHECKER, SMOL_MARKER) >= 0
        assert explorer.locator("[data-testid^=thumb-]").count() == 270
        render_ms = explorer.get_attribute("data-render-ms")

        explorer.locator("[data-testid=query-token-5]").hover()  # hover: the browser alone
        assert explorer.get_attribute("data-active-row") == "5"
        best = int(w[0, 0, 5].argmax())
        assert explorer.locator("[data-testid=readout]").inner_text(timeout=ACTION_MS) == \
            f"t5 → t{best}: {w[0, 0, 5, best].item():.3f} (largest weight)"
        explorer.locator("[data-testid=query-token-5]").click()  # pin
        assert explorer.get_attribute("data-selected") == "5"

        before = explorer.evaluate(CANVAS_SUM, "heatmap-canvas")
        explorer.locator("[data-testid=layer-select]").select_option("18")  # a layer from the menu
        assert explorer.get_attribute("data-layer") == "18"
        assert explorer.evaluate(CANVAS_SUM, "heatmap-canvas") != before, "switching layers did not change the map"
        explorer.locator("[data-testid=thumb-29-8]").click()  # the last head, at the bottom of the scrolling grid
        assert explorer.get_attribute("data-layer") == "29" and explorer.get_attribute("data-head") == "8"
        explorer.locator("[data-testid=sink-toggle]").check()  # the sink's column stops setting the top colour
        assert explorer.get_attribute("data-clip-sink") == "1"
        top = float(w[29, :, :, 1:].amax())
        assert explorer.locator("[data-testid=colorbar]").get_attribute("data-vmax") == f"{top:.3f}"

        page.locator("[data-e2e=checker] .jp-InputPrompt").click()  # the kernel saw all of it
        page.keyboard.press("Control+Enter")
        expected = "layer=29 head=8 selected=5 clip_sink=True"
        page.wait_for_function("(text) => (document.querySelector('[data-e2e=checker] .jp-OutputArea')?.innerText || '')"
                               ".includes(text)", arg=expected, timeout=30_000)
        explorer.scroll_into_view_if_needed()
        explorer.screenshot(path=str(artifacts / f"explorer_e2e_{frontend}_30x9.png"))
        print(f"\n{frontend} 30 x 9 explorer: render {render_ms} ms in the page")
        assert page_errors == [], f"uncaught errors in the page: {page_errors}"
