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

PICTURES = """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
    .filter((i) => i.src.startsWith('data:image/png') && i.complete && i.naturalWidth > 0)
    .map((i) => [i.naturalWidth, i.naturalHeight, i.getBoundingClientRect().width])"""


def stored_widget_outputs() -> int:
    cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text())["cells"]
    bundles = [o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    widgets = [b for b in bundles if WIDGET_MIME in b and "".join(b["text/plain"]).startswith("Attention")]
    assert all("image/png" in b for b in widgets), "a stored widget output has no image/png: re-execute the notebook"
    return len(widgets)


@pytest.mark.timeout(150)
def test_saved_notebook_shows_pictures_before_running(jupyter, browser_context, artifacts):  # noqa: F811
    frontend, base, token, log = jupyter
    expected = stored_widget_outputs()
    assert expected >= 3  # the explorer, the compare view, the date map, ...
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: None if is_known_frontend_error(frontend, e) else errors.append(str(e)))
    try:
        page.goto(f"{base}{FRONTENDS[frontend][2]}token={token}", timeout=60_000)
        page.wait_for_selector(".jp-OutputArea-output", timeout=60_000)
        page.wait_for_function(f"() => ({PICTURES})().length >= {expected}", timeout=30_000)
        pictures = page.evaluate(PICTURES)
        assert all(w >= 300 and h >= 150 for w, h, _ in pictures), pictures  # a figure, not an icon
        assert all(shown > 100 for _, _, shown in pictures), pictures       # and laid out visibly
        texts = page.locator(".jp-OutputArea-output").all_inner_texts()
        bad = [t for t in texts if "Error displaying widget" in t or "model not found" in t]
        assert bad == [], f"widget errors shown instead of the picture: {bad}"
        page.screenshot(path=str(artifacts / f"notebook_static_{frontend}.png"), full_page=False)
        print(f"\n{frontend}: {len(pictures)} pictures shown for {expected} stored widget outputs")
    except Exception:
        page.screenshot(path=str(artifacts / f"notebook_static_{frontend}_failure.png"))
        raise
    finally:
        page.close()
    assert errors == [], f"uncaught errors in the page: {errors}"
