"""The saved notebook 08, opened in JupyterLab and Notebook 7 WITHOUT running it, shows real pictures.

Each widget output is stored with an image/png (and an <img> in text/html) beside the widget
view. Before anything runs there is no widget model, so the front end must fall back to the
picture: this test opens the stored notebook and checks that every widget output shows a
loaded image of a sensible size, and that no output says "Error displaying widget". (Only
attnlib's widgets are counted: the ipywidgets.Output of section 5 has no picture to show.)
The server fixture (and its contract) comes from test_explorer_e2e.py.
"""
from __future__ import annotations

import json

import pytest

from .helpers import ROOT
from .test_explorer_e2e import FRONTENDS, NOTEBOOK, is_known_frontend_error, jupyter  # noqa: F401  (jupyter: the server)

pytestmark = pytest.mark.browser

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

PICTURES = """(cells) => cells.map((k) => {
    const node = window.jupyterapp.shell.currentWidget.content.widgets[k].node;
    const imgs = [...node.querySelectorAll('.jp-OutputArea-output img')]
        .filter((i) => i.src.startsWith('data:image/png') && i.complete && i.naturalWidth > 0);
    const text = [...node.querySelectorAll('.jp-OutputArea-output')].map((o) => o.innerText).join(' ');
    return {cell: k, pictures: imgs.map((i) => [i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width]), text};
})"""


def stored_widget_cells() -> list[int]:
    """Indices of the code cells whose visible stored outputs include one of attnlib's widgets (each must carry a PNG)."""
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    found = []
    for k, c in enumerate(cells):
        if c.get("metadata", {}).get("jupyter", {}).get("outputs_hidden"):
            continue  # a collapsed solution: its outputs stay hidden until the learner opens it
        bundles = [o.get("data", {}) for o in c.get("outputs", [])]
        ours = [b for b in bundles if WIDGET_MIME in b and "".join(b["text/plain"]).startswith("Attention")]
        assert all("image/png" in b for b in ours), f"cell {k}: a stored widget output has no image/png; re-execute"
        if ours:
            found.append(k)
    return found


@pytest.mark.timeout(150)
def test_saved_notebook_shows_pictures_before_running(jupyter, browser_context, artifacts):  # noqa: F811
    frontend, base, token, log = jupyter
    cells = stored_widget_cells()
    assert len(cells) >= 3  # the explorer, the compare view, the date map, ...
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: None if is_known_frontend_error(frontend, e) else errors.append(str(e)))
    try:
        page.goto(f"{base}{FRONTENDS[frontend][2]}token={token}", timeout=60_000)
        page.wait_for_function("(n) => window.jupyterapp?.shell.currentWidget?.content?.widgets?.length > n",
                               arg=max(cells), timeout=60_000)
        page.wait_for_function(f"(cells) => ({PICTURES})(cells).every((c) => c.pictures.length > 0)", arg=cells,
                               timeout=30_000)
        seen = page.evaluate(PICTURES, cells)
        for c in seen:  # in each widget's own cell: a figure, not an icon, laid out visibly, and no widget error
            assert all(w >= 300 and h >= 150 and shown > 100 for w, h, shown in c["pictures"]), c
            assert "Error displaying widget" not in c["text"] and "model not found" not in c["text"], c
        page.screenshot(path=str(artifacts / f"notebook_static_{frontend}.png"), full_page=False)
        print(f"\n{frontend}: pictures in every widget cell {cells}: {[c['pictures'] for c in seen]}")
    except Exception:
        page.screenshot(path=str(artifacts / f"notebook_static_{frontend}_failure.png"))
        raise
    finally:
        page.close()
    assert errors == [], f"uncaught errors in the page: {errors}"
