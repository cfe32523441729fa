"""``widget.to_html(path)`` opened from file:// in Chromium with every other request blocked.

The page must work on its own: hover, pin and the head switch react, and no request other
than the file itself is attempted (each one is recorded, then aborted).
"""
from __future__ import annotations

import pytest
import torch

from attnlib.viz.widgets import AttentionExplorer, AttentionHeatmap

pytestmark = pytest.mark.browser

TOKENS = "the animal didn't cross the street because it was too tired".split()
IT, ANIMAL = TOKENS.index("it"), TOKENS.index("animal")


def softmax_maps(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(*shape, generator=g), dim=-1)


def open_offline(context, path):
    """Open ``path`` from file://, aborting and recording every request that is not the file."""
    page = context.new_page()
    attempted, errors = [], []

    def guard(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("[data-testid=attn-root]")
    return page, attempted, errors


def test_exported_explorer_works_offline(browser_context, tmp_path, artifacts):
    w = softmax_maps(2, 3, 11, 11, seed=21)
    ex = AttentionExplorer(w, TOKENS, title="export </script> test", layer=1, head=2)
    path = ex.to_html(tmp_path / "explorer.html")
    page, attempted, errors = open_offline(browser_context, path)
    try:
        root = page.locator("[data-testid=attn-root]")
        assert page.title() == "export </script> test"
        assert page.inner_text("[data-testid=title]") == "export </script> test"  # escaped, and still the text
        assert root.get_attribute("data-layer") == "1" and root.get_attribute("data-head") == "2"

        page.hover(f"[data-testid=query-token-{IT}]")  # hover
        assert root.get_attribute("data-active-row") == str(IT)
        assert page.get_attribute(f"[data-testid=key-token-{ANIMAL}]", "data-weight") == f"{w[1, 2, IT, ANIMAL].item():.3f}"
        page.click(f"[data-testid=query-token-{IT}]")  # pin
        assert page.evaluate("attnlibModel.get('selected')") == IT
        page.select_option("[data-testid=head-select]", "0")  # head switch
        page.mouse.move(1, 1)
        assert root.get_attribute("data-head") == "0" and root.get_attribute("data-selected") == str(IT)
        assert page.get_attribute(f"[data-testid=key-token-{ANIMAL}]", "data-weight") == f"{w[1, 0, IT, ANIMAL].item():.3f}"
        page.hover(f"[data-testid=key-token-{ANIMAL}]")  # the key direction works too
        assert page.inner_text("[data-testid=readout]") == f"it → animal: {w[1, 0, IT, ANIMAL].item():.3f}"
        page.click("[data-testid=thumb-0-1]")
        assert root.get_attribute("data-layer") == "0" and root.get_attribute("data-head") == "1"
        page.screenshot(path=str(artifacts / "export_explorer.png"))
    finally:
        page.close()
    assert attempted == [], f"the exported page tried to reach the network: {attempted}"
    assert errors == [], f"errors in the exported page: {errors}"


def test_exported_heatmap_with_mask_works_offline(browser_context, tmp_path):
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    w = torch.softmax(torch.randn(5, 5, generator=torch.Generator().manual_seed(3)).masked_fill(~allowed, -1e9), -1)
    hm = AttentionHeatmap(w, list("abcde"), mask=allowed, selected=2)
    page, attempted, errors = open_offline(browser_context, hm.to_html(tmp_path / "map.html"))
    try:
        assert page.get_attribute("[data-testid=attn-root]", "data-selected") == "2"
        assert page.get_attribute("[data-testid=key-token-4]", "data-weight") == "masked"
        assert page.is_visible("[data-testid=mask-key]")
    finally:
        page.close()
    assert attempted == [] and errors == [], (attempted, errors)


def test_exported_big_explorer_carries_every_map_in_8_bits(browser_context, tmp_path):
    n = 300  # 6 x 12 x 300 x 300 float32 = 26 MB: sent on demand in a notebook, 8 bits a cell in the export
    w = softmax_maps(6, 12, n, n, seed=24)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(n)], layer=1, head=2)
    assert ex._lazy
    page, attempted, errors = open_offline(browser_context, ex.to_html(tmp_path / "big.html"))
    try:
        root = page.locator("[data-testid=attn-root]")
        assert root.get_attribute("data-exact") == "1"  # the map on display is exact
        page.hover("[data-testid=query-token-5]")
        best = int(w[1, 2, 5].argmax())
        assert page.inner_text("[data-testid=readout]") == f"t5 → t{best}: {w[1, 2, 5, best].item():.3f} (largest weight)"
        page.click("[data-testid=thumb-4-7]")  # another head: from the 8-bit copy, marked as such
        assert root.get_attribute("data-loading") == "" and root.get_attribute("data-exact") == "0"
        page.hover("[data-testid=query-token-5]")
        text = page.inner_text("[data-testid=readout]")
        best = int(w[4, 7, 5].argmax())
        shown = float(text.split(": ")[1].split(" ")[0])
        hi = ex._map_hi[4 * 12 + 7]
        assert text.startswith(f"t5 → t{best}: ") and text.endswith("(≈ 8-bit copy)"), text
        assert abs(shown - w[4, 7, 5, best].item()) <= hi / 508 + 0.0005, (shown, w[4, 7, 5, best].item())
    finally:
        page.close()
    assert attempted == [] and errors == [], (attempted, errors)
