"""The widgets' ES module in a bare Chromium page, without Jupyter (about a second per test).

A fake anywidget model (get/set/on/off/save_changes) feeds ``render({model, el})``; the
state comes from real ``AttentionHeatmap``/``AttentionExplorer`` objects. Timings (512 x 512
render, hover latency) are measured and written to test-artifacts/widget_timings.json, never
asserted.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from attnlib import AttentionExplorer, AttentionHeatmap

from .helpers import median, open_bare_page, widget_state

pytestmark = pytest.mark.browser

TOKENS = "the animal didn't cross the street because it was too tired".split()
IT, ANIMAL = TOKENS.index("it"), TOKENS.index("animal")


def softmax_maps(*shape: int, seed: int) -> torch.Tensor:
    """Illustrative random attention maps (rows sum to 1); real maps live in the notebooks."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture
def page(browser_context):
    page, errors = open_bare_page(browser_context)
    yield page
    page.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def attr(page, selector: str, name: str) -> str | None:
    return page.locator(selector).get_attribute(name)


def canvas_geometry(page, name: str) -> dict:
    return page.evaluate("""(name) => {
        const c = document.querySelector(`#${name} [data-testid=heatmap-canvas]`), b = c.getBoundingClientRect();
        return {x: b.left, y: b.top, left: +c.dataset.left, top: +c.dataset.top, cell: +c.dataset.cell};
    }""", name)


def cell_centre(g: dict, i: int, j: int) -> tuple[float, float]:
    return g["x"] + g["left"] + (j + 0.5) * g["cell"], g["y"] + g["top"] + (i + 0.5) * g["cell"]


def pixel(page, name: str, testid: str, x: float, y: float) -> list[int]:
    """RGBA of a canvas pixel at CSS coordinates (x, y) relative to the canvas."""
    return page.evaluate("""([name, testid, x, y]) => {
        const c = document.querySelector(`#${name} [data-testid=${testid}]`), r = c.width / c.clientWidth;
        return Array.from(c.getContext("2d").getImageData(Math.floor(x * r), Math.floor(y * r), 1, 1).data);
    }""", [name, testid, x, y])


def map_checksum(page, name: str) -> float:
    return page.evaluate("""(name) => {
        const c = document.querySelector(`#${name} [data-testid=heatmap-canvas]`);
        const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        let s = 0; for (let p = 0; p < d.length; p++) s += d[p] * ((p % 251) + 1); return s;
    }""", name)


def test_two_widgets_on_one_page_are_independent(page):
    wa = softmax_maps(11, 11, seed=0)
    wb = softmax_maps(4, 11, seed=1)  # cross-attention: 4 target tokens attend to the 11 source tokens
    a = AttentionHeatmap(wa, TOKENS, title="A")
    b = AttentionHeatmap(wb, ["le", "chat", "est", "fatigué"], TOKENS, title="B")
    page.evaluate("([sa, sb]) => { mount('a', sa); mount('b', sb); }", [widget_state(a), widget_state(b)])
    root_a, root_b = "#a [data-testid=attn-root]", "#b [data-testid=attn-root]"
    assert attr(page, root_a, "data-active-row") == "" and attr(page, root_b, "data-active-row") == ""

    page.hover(f"#a [data-testid=query-token-{IT}]")  # hover previews, entirely in the browser
    assert attr(page, root_a, "data-active-row") == str(IT)
    assert attr(page, root_b, "data-active-row") == ""
    for j, tok in enumerate(TOKENS):
        chip = f"#a [data-testid=key-token-{j}]"
        assert attr(page, chip, "data-weight") == f"{wa[IT, j].item():.3f}"
        assert attr(page, chip, "title") == f"it → {tok}: {wa[IT, j].item():.3f}"
        assert attr(page, f"#b [data-testid=key-token-{j}]", "data-weight") is None
    best = int(wa[IT].argmax())
    assert page.inner_text("#a [data-testid=readout]").startswith(f"it → {TOKENS[best]}: {wa[IT, best].item():.3f}")

    page.click(f"#a [data-testid=query-token-{IT}]")  # click pins: the model changes and is saved
    assert page.evaluate("[models.a.get('selected'), models.a.saves, models.b.get('selected'), models.b.saves]") \
        == [IT, 1, None, 0]
    assert page.is_visible("#a [data-testid=pinned-marker]") and page.is_hidden("#b [data-testid=pinned-marker]")
    assert page.inner_text("#a [data-testid=pinned-marker]") == "pinned query: it ×"

    page.hover(f"#a [data-testid=key-token-{ANIMAL}]")  # the pinned row stays; hover a key for its value
    assert page.inner_text("#a [data-testid=readout]") == f"it → animal: {wa[IT, ANIMAL].item():.3f}"
    page.hover("#b [data-testid=query-token-1]")
    assert attr(page, root_b, "data-active-row") == "1"
    assert attr(page, root_a, "data-active-row") == str(IT) and attr(page, root_a, "data-hover-row") == ""
    assert attr(page, "#b [data-testid=key-token-0]", "data-weight") == f"{wb[1, 0].item():.3f}"

    page.click(f"#a [data-testid=query-token-{IT}]")  # clicking again unpins
    assert page.evaluate("models.a.get('selected')") is None
    assert page.is_hidden("#a [data-testid=pinned-marker]")

    page.evaluate("models.a.set('title', 'A, renamed')")
    assert page.inner_text("#a [data-testid=title]") == "A, renamed" and page.inner_text("#b [data-testid=title]") == "B"
    page.evaluate("models.a.set('selected', 3)")  # as if Python set it
    assert attr(page, root_a, "data-selected") == "3"
    assert attr(page, "#a [data-testid=query-token-3]", "aria-pressed") == "true"
    assert attr(page, root_b, "data-selected") == ""


def test_canvas_hover_highlights_the_row_with_exact_values(page):
    w = softmax_maps(11, 11, seed=2)
    hm = AttentionHeatmap(w, TOKENS)
    page.evaluate("(s) => mount('a', s)", widget_state(hm))
    g = canvas_geometry(page, "a")
    page.mouse.move(*cell_centre(g, IT, ANIMAL))
    assert attr(page, "#a [data-testid=attn-root]", "data-active-row") == str(IT)
    assert page.inner_text("#a [data-testid=readout]") == f"it → animal: {w[IT, ANIMAL].item():.3f}"

    # Cells are coloured by the palette from Python, 0 .. the largest weight of the map.
    lut = np.frombuffer(hm._palette, np.uint8).reshape(256, 3)
    vmax = float(hm.weights.max())
    for i, j in [(0, 0), (IT, ANIMAL), (10, 3)]:
        expected = lut[int(np.clip(np.round(hm.weights[i, j] / vmax * 255), 0, 255))]
        x, y = cell_centre(g, i, j)
        assert pixel(page, "a", "heatmap-canvas", x - g["x"], y - g["y"])[:3] == expected.tolist()
    # The overlay dims every other row and leaves the highlighted row clear.
    x, y = cell_centre(g, 2, 5)
    assert pixel(page, "a", "heatmap-overlay", x - g["x"], y - g["y"])[3] > 0
    x, y = cell_centre(g, IT, 5)
    assert pixel(page, "a", "heatmap-overlay", x - g["x"], y - g["y"])[3] == 0

    page.mouse.click(*cell_centre(g, IT, 0))
    assert page.evaluate("models.a.get('selected')") == IT
    page.mouse.move(1, 1)  # leaving the map: the pinned row stays highlighted
    assert attr(page, "#a [data-testid=attn-root]", "data-active-row") == str(IT)
    assert attr(page, "#a [data-testid=attn-root]", "data-hover-row") == ""


def test_explorer_switches_layers_and_heads(page):
    w = softmax_maps(2, 3, 11, 11, seed=3)
    ex = AttentionExplorer(w, TOKENS, layer_names=["block 1", "block 2"])
    page.evaluate("(s) => mount('e', s)", widget_state(ex))
    root = "#e [data-testid=attn-root]"
    before = map_checksum(page, "e")
    page.select_option("#e [data-testid=head-select]", "2")
    assert page.evaluate("[models.e.get('head'), models.e.saves]") == [2, 1]
    assert attr(page, root, "data-head") == "2"
    assert map_checksum(page, "e") != before
    assert "is-current" in attr(page, "#e [data-testid=thumb-0-2]", "class")

    page.click("#e [data-testid=thumb-0-1]")  # open a head from the grid
    assert page.evaluate("models.e.get('head')") == 1
    assert page.input_value("#e [data-testid=head-select]") == "1"

    page.evaluate("models.e.set('layer', 1)")  # as if Python set it
    assert page.input_value("#e [data-testid=layer-select]") == "1"
    assert attr(page, root, "data-layer") == "1"
    assert "block 2, head 1" in page.inner_text("#e [data-testid=legend]")

    page.click(f"#e [data-testid=query-token-{IT}]")  # a pin survives a head switch
    page.select_option("#e [data-testid=head-select]", "0")
    page.mouse.move(1, 1)
    assert attr(page, root, "data-selected") == str(IT)
    assert attr(page, "#e [data-testid=key-token-1]", "data-weight") == f"{w[1, 0, IT, 1].item():.3f}"


def test_unaligned_buffer_raw_scores_and_cleanup(page):
    scores = 3.0 * torch.randn(5, 7, generator=torch.Generator().manual_seed(4))
    hm = AttentionHeatmap(scores, ["<pad>", "a&b", "c", "d", "e"], list("ABCDEFG"), raw_scores=True)
    page.evaluate("(s) => mount('r', s, 2)", widget_state(hm))  # weights at byte offset 2: not float-aligned
    assert page.inner_text("#r [data-testid=query-token-0]") == "<pad>"  # tokens are text, never markup
    assert page.inner_text("#r [data-testid=query-token-1]") == "a&b"
    page.hover("#r [data-testid=query-token-4]")
    assert attr(page, "#r [data-testid=key-token-6]", "data-weight") == f"{scores[4, 6].item():.3f}"
    lim = scores.abs().max().item()  # diverging: centred on 0
    assert page.inner_text("#r [data-testid=legend]").startswith("raw scores, diverging around 0")
    assert attr(page, "#r [data-testid=colorbar]", "data-vmin") == f"{-lim:.3f}"
    assert attr(page, "#r [data-testid=colorbar]", "data-vmax") == f"{lim:.3f}"
    page.evaluate("cleanups.r()")  # removing the view unhooks its listeners
    assert page.locator("#r [data-testid=attn-root]").count() == 0
    page.evaluate("models.r.set('selected', 1)")  # must not throw


def test_512_map_render_time_and_hover_latency(page, artifacts):
    n = 512
    w = softmax_maps(n, n, seed=5)
    hm = AttentionHeatmap(w, [f"t{i}" for i in range(n)])
    state = widget_state(hm)
    page.evaluate("(s) => { window.bigState = prepare(s); }", state)
    render_ms, frame_ms = [], []
    for run in range(5):
        sync_ms, to_frame = page.evaluate(f"""async () => {{
            const t0 = performance.now(), ms = mount('big{run}', window.bigState);
            await new Promise((res) => requestAnimationFrame(() => setTimeout(res, 0)));
            return [ms, performance.now() - t0]; }}""")
        render_ms.append(sync_ms)   # render() itself: decode, colour 262k cells, build 1024 chips
        frame_ms.append(to_frame)   # until the next frame is produced (layout and paint included)
        if run < 4:
            page.evaluate(f"cleanups.big{run}()")
    name = "big4"
    rows = list(range(3, n, 17))  # 30 rows
    hover = page.evaluate("""async ([name, rows]) => {
        const c = document.querySelector(`#${name} [data-testid=heatmap-canvas]`), b = c.getBoundingClientRect();
        const root = document.querySelector(`#${name} [data-testid=attn-root]`);
        const sync = [], frame = [];
        for (const r of rows) {
            const t0 = performance.now();
            c.dispatchEvent(new MouseEvent("mousemove", {bubbles: true,
                clientX: b.left + +c.dataset.left + 100.5 * +c.dataset.cell, clientY: b.top + +c.dataset.top + (r + 0.5) * +c.dataset.cell}));
            sync.push(performance.now() - t0);               // handler done: overlay, 512 key chips, readout
            await new Promise((res) => requestAnimationFrame(() => setTimeout(res, 0)));
            frame.push(performance.now() - t0);              // until the next frame was produced
            if (root.dataset.activeRow !== String(r)) throw new Error(`row ${r} not highlighted: ${root.dataset.activeRow} ${JSON.stringify(c.getBoundingClientRect())} ${JSON.stringify(b)}`);
        }
        return {sync, frame};
    }""", [name, rows])
    # Through Playwright (a real mouse event and a CDP round trip), for comparison.
    g = canvas_geometry(page, name)
    pw_ms = []
    for r in rows[:10]:
        t0 = time.perf_counter()
        page.mouse.move(*cell_centre(g, r, 200))
        page.wait_for_function(f"document.querySelector('#{name} [data-testid=attn-root]').dataset.activeRow === '{r}'")
        pw_ms.append(1000 * (time.perf_counter() - t0))
    r = rows[9]
    j = int(w[r].argmax())
    page.mouse.move(*cell_centre(g, r, j))
    assert page.inner_text(f"#{name} [data-testid=readout]") == f"t{r} → t{j}: {w[r, j].item():.3f}"

    timings = {
        "map": f"{n} x {n}",
        "render_ms_runs": [round(x, 1) for x in render_ms],
        "render_ms_median": round(median(render_ms), 1),
        "render_to_next_frame_ms_runs": [round(x, 1) for x in frame_ms],
        "render_to_next_frame_ms_median": round(median(frame_ms), 1),
        "hover_handler_ms_median": round(median(hover["sync"]), 2),
        "hover_to_next_frame_ms_median": round(median(hover["frame"]), 1),
        "hover_via_playwright_ms_median": round(median(pw_ms), 1),
    }
    (artifacts / "widget_timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print("\nwidget timings:", timings)
