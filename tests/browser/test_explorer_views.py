"""The explorer's v2 views in a bare Chromium page: colour scales, both directions, keyboard, grid, mask.

Same harness as test_widget_js.py (a fake anywidget model, state from real widgets).
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from attnlib.viz.widgets import AttentionExplorer, AttentionHeatmap

from .helpers import open_bare_page, widget_state
from .test_widget_js import attr, canvas_geometry, cell_centre, pixel, softmax_maps

pytestmark = pytest.mark.browser

TOKENS = "the animal didn't cross the street because it was too tired".split()
IT, ANIMAL = TOKENS.index("it"), TOKENS.index("animal")


@pytest.fixture
def page(browser_context):
    page, errors = open_bare_page(browser_context)
    yield page
    page.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def two_heads_015_099() -> torch.Tensor:
    """One layer, two heads over 8 tokens: head 0 peaks at 0.15 (almost uniform), head 1 at 0.99."""
    w = torch.zeros(1, 2, 8, 8)
    w[0, 0] = 0.85 / 7
    w[0, 0].fill_diagonal_(0.15)
    w[0, 1] = 0.01 / 7
    w[0, 1].fill_diagonal_(0.99)
    return w


def thumb_pixel(page, name: str, l: int, hd: int, fx: float, fy: float) -> list[int]:
    """RGB of a grid thumbnail at a fraction (fx, fy) of its size, as seen on screen (outlines included)."""
    from PIL import Image

    shot = Image.open(io.BytesIO(page.locator(f"#{name} [data-testid=thumb-{l}-{hd}]").screenshot())).convert("RGB")
    inset = 3  # the button's 2 px border and 1 px padding
    return list(shot.getpixel((inset + int(fx * 56), inset + int(fy * 56))))


def test_a_dim_head_stays_dim_on_the_layer_scale(page):
    ex = AttentionExplorer(two_heads_015_099(), list("abcdefgh"))
    lut = np.frombuffer(ex._palette, np.uint8).reshape(256, 3)
    top = lut[255].tolist()
    page.evaluate("(s) => mount('e', s)", widget_state(ex))
    g = canvas_geometry(page, "e")
    x, y = cell_centre(g, 3, 3)  # the diagonal: head 0's largest weight, 0.15
    peak = pixel(page, "e", "heatmap-canvas", x - g["x"], y - g["y"])[:3]
    assert peak == lut[round(0.15 / 0.99 * 255)].tolist() and peak != top  # one scale per layer (default)
    assert attr(page, "#e [data-testid=colorbar]", "data-vmax") == "0.990"
    assert thumb_pixel(page, "e", 0, 0, 3.5 / 8, 3.5 / 8) != top  # the thumbnail uses the same scale
    assert thumb_pixel(page, "e", 0, 1, 3.5 / 8, 3.5 / 8) == top  # the 0.99 head does reach the top
    assert page.inner_text("#e [data-testid=colorbar]").split() == ["0.000", "0.495", "0.990"]

    page.select_option("#e [data-testid=scale-select]", "map")  # per map: now the dim head is stretched
    assert page.evaluate("models.e.get('scale')") == "map"
    assert pixel(page, "e", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == top
    assert attr(page, "#e [data-testid=colorbar]", "data-vmax") == "0.150"
    assert attr(page, "#e [data-testid=attn-root]", "data-scale") == "map"

    page.select_option("#e [data-testid=scale-select]", "fixed")  # fixed 0..1 for weights
    assert page.evaluate("[models.e.get('vmin'), models.e.get('vmax')]") == [0, 1]
    assert pixel(page, "e", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == lut[round(0.15 * 255)].tolist()
    page.evaluate("models.e.set('scale', 'layer')")  # as if Python set it
    assert page.input_value("#e [data-testid=scale-select]") == "layer"
    assert pixel(page, "e", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == peak


def test_hover_and_pin_a_key_shows_who_attends_there(page):
    w = softmax_maps(11, 11, seed=11)
    hm = AttentionHeatmap(w, TOKENS)
    page.evaluate("(s) => mount('a', s)", widget_state(hm))
    root = "#a [data-testid=attn-root]"
    page.hover(f"#a [data-testid=key-token-{ANIMAL}]")
    assert attr(page, root, "data-active-col") == str(ANIMAL) and attr(page, root, "data-active-row") == ""
    for i, tok in enumerate(TOKENS):  # the query chips carry the column: who attends to "animal"
        chip = f"#a [data-testid=query-token-{i}]"
        assert attr(page, chip, "data-weight") == f"{w[i, ANIMAL].item():.3f}"
        assert attr(page, chip, "title") == f"{tok} → animal: {w[i, ANIMAL].item():.3f}"
    best = int(w[:, ANIMAL].argmax())
    assert page.inner_text("#a [data-testid=readout]") == \
        f"who attends to animal: {TOKENS[best]} → animal: {w[best, ANIMAL].item():.3f} (largest weight)"
    g = canvas_geometry(page, "a")  # the overlay dims the other columns, not this one
    x, y = cell_centre(g, 4, ANIMAL)
    assert pixel(page, "a", "heatmap-overlay", x - g["x"], y - g["y"])[3] == 0
    x, y = cell_centre(g, 4, ANIMAL + 2)
    assert pixel(page, "a", "heatmap-overlay", x - g["x"], y - g["y"])[3] > 0

    page.click(f"#a [data-testid=key-token-{ANIMAL}]")  # pin the key
    assert page.evaluate("[models.a.get('selected_key'), models.a.saves]") == [ANIMAL, 1]
    page.mouse.move(1, 1)
    assert attr(page, root, "data-active-col") == str(ANIMAL) and attr(page, root, "data-selected-key") == str(ANIMAL)
    assert page.inner_text("#a [data-testid=pinned-marker]") == "pinned key: animal ×"
    page.click("#a [data-testid=pinned-marker]")
    assert page.evaluate("models.a.get('selected_key')") is None


def test_the_labels_beside_the_map_react(page):
    """Notebook text says 'hover a token on the left': the painted labels must react, both axes."""
    w = softmax_maps(11, 11, seed=12)
    page.evaluate("(s) => mount('a', s)", widget_state(AttentionHeatmap(w, TOKENS)))
    g = canvas_geometry(page, "a")
    assert g["left"] > 20 and g["top"] > 20  # labels are drawn at this size
    root = "#a [data-testid=attn-root]"
    page.mouse.move(g["x"] + g["left"] / 2, g["y"] + g["top"] + (IT + 0.5) * g["cell"])  # the label "it", left
    assert attr(page, root, "data-active-row") == str(IT) and attr(page, root, "data-active-col") == ""
    page.mouse.move(g["x"] + g["left"] + (ANIMAL + 0.5) * g["cell"], g["y"] + g["top"] / 2)  # "animal", above
    assert attr(page, root, "data-active-col") == str(ANIMAL) and attr(page, root, "data-active-row") == ""
    page.mouse.click(g["x"] + g["left"] + (ANIMAL + 0.5) * g["cell"], g["y"] + g["top"] / 2)
    page.mouse.click(g["x"] + g["left"] / 2, g["y"] + g["top"] + (IT + 0.5) * g["cell"])
    assert page.evaluate("[models.a.get('selected'), models.a.get('selected_key')]") == [IT, ANIMAL]
    page.mouse.move(1, 1)
    assert page.inner_text("#a [data-testid=readout]") == f"it → animal: {w[IT, ANIMAL].item():.3f}"


def test_keyboard_moves_pins_and_unpins(page):
    w = softmax_maps(2, 2, 11, 11, seed=13)
    ex = AttentionExplorer(w, TOKENS)
    page.evaluate("(s) => mount('e', s)", widget_state(ex))
    root = page.locator("#e [data-testid=attn-root]")
    assert root.get_attribute("tabindex") == "0" and "Arrow keys" in root.get_attribute("aria-label")
    root.focus()
    for _ in range(IT + 1):
        page.keyboard.press("ArrowDown")
    assert root.get_attribute("data-active-row") == str(IT)
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowDown")
    for _ in range(ANIMAL + 1):
        page.keyboard.press("ArrowRight")
    assert root.get_attribute("data-active-col") == str(ANIMAL)
    assert page.inner_text("#e [data-testid=readout]") == f"it → animal: {w[0, 0, IT, ANIMAL].item():.3f}"
    page.keyboard.press("Enter")
    assert page.evaluate("[models.e.get('selected'), models.e.get('selected_key')]") == [IT, ANIMAL]
    assert page.get_attribute(f"#e [data-testid=query-token-{IT}]", "aria-pressed") == "true"
    page.keyboard.press("Escape")
    assert page.evaluate("[models.e.get('selected'), models.e.get('selected_key')]") == [None, None]
    assert root.get_attribute("data-active-row") == "" and root.get_attribute("data-active-col") == ""
    for _ in range(30):  # the cursor stops at the edge
        page.keyboard.press("ArrowUp")
    assert root.get_attribute("data-active-row") == "0"


def test_grid_shows_every_head_outlines_the_row_and_opens_a_head(page):
    w = softmax_maps(3, 4, 11, 11, seed=14)
    ex = AttentionExplorer(w, TOKENS)
    page.evaluate("(s) => mount('e', s)", widget_state(ex))
    assert page.locator("#e [data-testid=head-grid] [data-testid^=thumb-]").count() == 12
    plain = thumb_pixel(page, "e", 2, 3, 0.01, (IT + 0.5) / 11)
    page.hover(f"#e [data-testid=query-token-{IT}]")
    for l, hd in [(0, 0), (2, 3)]:  # the row is outlined (red) at its left edge in every thumbnail
        r, g_, b = thumb_pixel(page, "e", l, hd, 0.01, (IT + 0.5) / 11)
        assert r > 200 and g_ < 90 and b < 90, (l, hd, r, g_, b)
    assert plain != thumb_pixel(page, "e", 2, 3, 0.01, (IT + 0.5) / 11)
    page.click("#e [data-testid=thumb-2-3]")
    assert page.evaluate("[models.e.get('layer'), models.e.get('head')]") == [2, 3]
    assert page.input_value("#e [data-testid=layer-select]") == "2" and page.input_value("#e [data-testid=head-select]") == "3"
    assert "is-current" in page.get_attribute("#e [data-testid=thumb-2-3]", "class")
    assert "is-current" not in page.get_attribute("#e [data-testid=thumb-0-0]", "class")


def test_masked_cells_have_their_own_colour(page):
    n = 6
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax(torch.randn(n, n, generator=torch.Generator().manual_seed(15)).masked_fill(~allowed, -1e9), -1)
    hm = AttentionHeatmap(w, list("abcdef"), mask=allowed)
    page.evaluate("(s) => mount('m', s)", widget_state(hm))
    g = canvas_geometry(page, "m")
    x, y = cell_centre(g, 1, 4)  # masked
    assert pixel(page, "m", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == hm._mask_rgb
    x, y = cell_centre(g, 4, 1)  # allowed, maybe small: a palette colour, never the mask colour
    assert pixel(page, "m", "heatmap-canvas", x - g["x"], y - g["y"])[:3] != hm._mask_rgb
    assert page.is_visible("#m [data-testid=mask-key]")
    page.hover("#m [data-testid=query-token-1]")
    assert attr(page, "#m [data-testid=key-token-4]", "data-weight") == "masked"
    assert attr(page, "#m [data-testid=key-token-0]", "data-weight") == f"{w[1, 0].item():.3f}"


# ---- the view trait and the lines view -------------------------------------------------------------

def lines_pixel(page, name: str, x: float, y: float) -> list[int]:
    return pixel(page, name, "lines-canvas", x, y)


def test_view_menu_and_trait_switch_between_matrix_and_lines(page):
    w = softmax_maps(1, 2, 11, 11, seed=21)
    ex = AttentionExplorer(w, TOKENS)
    page.evaluate("(s) => mount('v', s)", widget_state(ex))
    root = "#v [data-testid=attn-root]"
    assert attr(page, root, "data-view") == "map" and not page.is_visible("#v [data-testid=lines-view]")
    page.select_option("#v [data-testid=view-select]", "lines")  # the page's menu sets the synced trait
    assert page.evaluate("models.v.get('view')") == "lines" and attr(page, root, "data-view") == "lines"
    assert page.is_visible("#v [data-testid=lines-view]") and not page.is_visible("#v [data-testid=heatmap-canvas]")
    page.evaluate("models.v.set('view', 'map')")  # as Python setting ex.view would
    assert attr(page, root, "data-view") == "map" and page.input_value("#v [data-testid=view-select]") == "map"
    long = AttentionHeatmap(softmax_maps(65, 65, seed=22), [f"t{i}" for i in range(65)])
    page.evaluate("(s) => mount('long', s)", widget_state(long))
    assert page.is_disabled("#long [data-testid=view-select] option[value=lines]")
    assert "at most 64 tokens" in page.inner_text("#long [data-testid=view-select] option[value=lines]")
    page.evaluate("models.long.set('view', 'lines')")  # a stale state: the page falls back to the matrix
    assert attr(page, "#long [data-testid=attn-root]", "data-view") == "map"


def test_lines_view_hover_and_pin_on_either_side(page):
    w = torch.full((11, 11), 0.002)
    w[IT, ANIMAL] = 1 - 0.002 * 10  # "it" looks at "animal"
    w[:IT].fill_(1 / 11)
    w[IT + 1:].fill_(1 / 11)
    hm = AttentionHeatmap(w, TOKENS, view="lines")
    top = np.frombuffer(hm._palette, np.uint8).reshape(256, 3)[255].tolist()
    page.evaluate("(s) => mount('l', s)", widget_state(hm))
    root = "#l [data-testid=attn-root]"
    assert attr(page, root, "data-view") == "lines"
    geo = page.evaluate("""() => { const c = document.querySelector('#l [data-testid=lines-canvas]');
        return {w: +c.dataset.width, row: +c.dataset.rowH}; }""")
    end = (geo["w"] - 2, (ANIMAL + 0.5) * geo["row"])  # where the it -> animal line meets the key column
    page.hover(f"#l [data-testid=lines-query-{IT}]")
    assert attr(page, root, "data-active-row") == str(IT)
    assert page.inner_text("#l [data-testid=readout]") == f"it → animal: {w[IT, ANIMAL].item():.3f} (largest weight)"
    assert lines_pixel(page, "l", *end)[:3] == top  # the strongest line: full colour at the top of the scale
    assert attr(page, f"#l [data-testid=lines-key-{ANIMAL}]", "data-weight") == f"{w[IT, ANIMAL].item():.3f}"
    page.click(f"#l [data-testid=lines-query-{IT}]")
    assert page.evaluate("models.l.get('selected')") == IT
    page.mouse.move(1, 1)
    assert attr(page, root, "data-active-row") == str(IT)  # pinned: still lit
    page.click(f"#l [data-testid=lines-query-{IT}]")  # unpin
    page.hover(f"#l [data-testid=lines-key-{ANIMAL}]")  # a key: who attends here
    assert attr(page, root, "data-active-col") == str(ANIMAL) and attr(page, root, "data-active-row") == ""
    assert page.inner_text("#l [data-testid=readout]").startswith("who attends to animal: it → animal")
    assert attr(page, f"#l [data-testid=lines-query-{IT}]", "data-weight") == f"{w[IT, ANIMAL].item():.3f}"
    page.click(f"#l [data-testid=lines-key-{ANIMAL}]")
    assert page.evaluate("models.l.get('selected_key')") == ANIMAL
    page.mouse.move(1, 1)
    far = lines_pixel(page, "l", geo["w"] - 2, (0 + 0.5) * geo["row"])  # a line to another key: not drawn now
    assert far[3] == 0, far


# ---- a big explorer: maps on demand ---------------------------------------------------------------

def test_a_big_explorer_draws_thumbnails_then_the_exact_map_sent_on_demand(page):
    n = 300
    w = softmax_maps(6, 12, n, n, seed=23)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(n)])
    assert ex._lazy
    page.evaluate("(s) => mount('b', s)", widget_state(ex))
    root = "#b [data-testid=attn-root]"
    assert attr(page, root, "data-loading") == "" and attr(page, root, "data-exact") == "1"
    page.hover("#b [data-testid=query-token-7]")
    best = int(w[0, 0, 7].argmax())
    assert page.inner_text("#b [data-testid=readout]") == f"t7 → t{best}: {w[0, 0, 7, best].item():.3f} (largest weight)"
    page.click("#b [data-testid=thumb-3-4]")  # no kernel here: the thumbnail stands in, and says so
    assert attr(page, root, "data-loading") == "1" and "loading the exact map" in page.inner_text("#b [data-testid=legend]")
    ex.layer, ex.head = 3, 4  # what the kernel does when the page sets layer and head: it sends that map
    sent = {k: v for k, v in widget_state(ex).items() if k in ("_exact", "_exact_at")}
    page.evaluate("(s) => { models.b.set('_exact_at', s._exact_at); models.b.set('_exact', s._exact); }", sent)
    assert attr(page, root, "data-loading") == ""
    page.hover("#b [data-testid=query-token-9]")
    best = int(w[3, 4, 9].argmax())
    assert page.inner_text("#b [data-testid=readout]") == f"t9 → t{best}: {w[3, 4, 9, best].item():.3f} (largest weight)"


def test_a_long_key_strip_shades_the_chips_in_view_and_the_rest_on_scroll(page):
    n = 300
    w = softmax_maps(n, n, seed=25)
    hm = AttentionHeatmap(w, [f"t{i}" for i in range(n)], selected=4)  # pinned: row 4 stays lit
    page.evaluate("(s) => mount('s', s)", widget_state(hm))
    page.mouse.move(1, 1)
    page.evaluate("models.s.set('selected', 5)")
    assert attr(page, "#s [data-testid=key-token-0]", "data-weight") == f"{w[5, 0].item():.3f}"
    assert attr(page, f"#s [data-testid=key-token-{n - 1}]", "data-weight") is None  # scrolled out of view
    page.evaluate("""() => { const s = document.querySelector('#s [data-testid=key-tokens]');
        s.scrollTop = s.scrollHeight; s.dispatchEvent(new Event('scroll')); }""")
    assert attr(page, f"#s [data-testid=key-token-{n - 1}]", "data-weight") == f"{w[5, n - 1].item():.3f}"
    assert attr(page, "#s [data-testid=key-token-0]", "data-weight") is None


# ---- 30 layers x 9 heads (SmolLM2-135M's shape), with a first-token sink ------------------------------

def smollm_like(n: int = 40, seed: int = 26) -> tuple[torch.Tensor, torch.Tensor]:
    """30 x 9 causal softmax maps; from layer 3 on a first-token sink takes 0.5-0.9 of every row."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax((2 * torch.randn(30, 9, n, n, generator=g)).masked_fill(~allowed, -1e9), -1)
    share = 0.5 + 0.4 * torch.rand(27, 9, 1, 1, generator=g)
    w[3:] = w[3:] * (1 - share)
    w[3:, :, :, 0] += share[..., 0]
    return w, allowed


GRID_BOX = """(name) => { const g = document.querySelector(`#${name} [data-testid=head-grid]`), b = g.getBoundingClientRect();
    const at = (l, h) => document.querySelector(`#${name} [data-testid=thumb-${l}-${h}]`).getBoundingClientRect();
    const seen = (r) => r.top >= b.top - 1 && r.bottom <= b.bottom + 1;
    return {height: b.height, width: b.width, scrollHeight: g.scrollHeight, scrollTop: g.scrollTop,
            thumb: at(0, 0).width, seen: [0, 10, 18, 29].map((l) => seen(at(l, 0))),
            head: document.querySelector(`#${name} .attnlib-gridhead.attnlib-gridtop`).getBoundingClientRect().top - b.top}; }"""


def test_a_30_by_9_explorer_scrolls_its_grid_and_clips_the_sink(page):
    w, allowed = smollm_like()
    ex = AttentionExplorer(w, [f"t{i}" for i in range(40)], mask=allowed)
    page.evaluate("(s) => mount('s', s)", widget_state(ex))
    root = "#s [data-testid=attn-root]"
    assert page.locator("#s [data-testid=head-grid] [data-testid^=thumb-]").count() == 270
    box = page.evaluate(GRID_BOX, "s")
    assert box["height"] <= 562 and box["scrollHeight"] > 2 * box["height"], box  # a box that scrolls, not 1.3 m of page
    assert box["thumb"] < 45 and box["seen"] == [True, True, False, False], box  # smaller thumbnails; layer 29 below

    page.select_option("#s [data-testid=layer-select]", "29")  # the open head's row scrolls into view
    box = page.evaluate(GRID_BOX, "s")
    assert box["seen"][3] and box["scrollTop"] > 0 and abs(box["head"]) <= 1, box  # the head names stay on top
    assert "is-current" in attr(page, "#s [data-testid=thumb-29-0]", "class")
    page.click("#s [data-testid=thumb-18-6]")  # Playwright scrolls the box to it, as a reader would
    assert page.evaluate("[models.s.get('layer'), models.s.get('head')]") == [18, 6]
    assert attr(page, root, "data-layer") == "18" and page.input_value("#s [data-testid=layer-select]") == "18"

    page.hover("#s [data-testid=query-token-20]")  # hover: exact values of layer 18, head 6
    best = int(w[18, 6, 20].argmax())
    assert page.inner_text("#s [data-testid=readout]").startswith(f"t20 → t{best}: {w[18, 6, 20, best].item():.3f}")
    assert attr(page, "#s [data-testid=colorbar]", "data-vmax") == "1.000"  # row 0 puts all its weight on t0
    g = canvas_geometry(page, "s")
    j = 1 + int(w[18, 6, 20, 1:].argmax())  # where t20 looks when it does not look at the sink
    x, y = cell_centre(g, 20, j)
    dim = pixel(page, "s", "heatmap-canvas", x - g["x"], y - g["y"])[:3]
    page.check("#s [data-testid=sink-toggle]")  # clip the sink: the top ignores column t0
    assert page.evaluate("[models.s.get('clip_sink'), models.s.saves > 0]") == [True, True]
    assert attr(page, root, "data-clip-sink") == "1"
    top = float(w[18, :, :, 1:].masked_fill(~allowed[:, 1:], 0).amax())  # the layer's largest weight outside t0
    assert attr(page, "#s [data-testid=colorbar]", "data-vmax") == f"{top:.3f}"
    assert f"≥ {top:.3f}" in page.inner_text("#s [data-testid=colorbar]")  # the top colour holds all above
    lut = np.frombuffer(ex._palette, np.uint8).reshape(256, 3)
    expected = lut[int(np.clip(round(float(w[18, 6, 20, j]) / top * 255), 0, 255))].tolist()
    assert pixel(page, "s", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == expected != dim
    x, y = cell_centre(g, 20, 0)
    assert pixel(page, "s", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == lut[255].tolist()  # the sink saturates
    page.evaluate("models.s.set('clip_sink', false)")  # as Python unsetting it would
    assert not page.is_checked("#s [data-testid=sink-toggle]") and attr(page, root, "data-clip-sink") == ""
