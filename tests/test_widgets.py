"""Python side of attnlib.viz.widgets: synced traitlets, input checks, the state object, static fallback.

The browser side is tested in tests/browser/ (a bare page, and JupyterLab end to end).
"""
from __future__ import annotations

import base64
import io
import json
import re

import matplotlib.image
import numpy as np
import pytest
import torch
import traitlets

import attnlib
from attnlib.viz.compare import compare
from attnlib.viz.export import CSS, ESM, EXPORT_MIME, PAYLOAD_MAX_BYTES, export_nbytes, export_page, export_state
from attnlib.viz.inputs import FILL_BELOW, ROW_SUM_TOL
from attnlib.viz.state import EAGER_MAX_BYTES, LINES_MAX_TOKENS
from attnlib.viz.widgets import AttentionExplorer, AttentionHeatmap

TOKENS = "the animal didn't cross the street because it was too tired".split()


def maps(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture
def heatmap() -> AttentionHeatmap:
    return AttentionHeatmap(maps(11, 11), TOKENS, title="toy")


@pytest.fixture
def explorer() -> AttentionExplorer:
    return AttentionExplorer(maps(2, 4, 11, 11), TOKENS)


# ---- construction ----------------------------------------------------------------------

def test_exported_from_attnlib():
    assert attnlib.AttentionHeatmap is AttentionHeatmap and attnlib.AttentionExplorer is AttentionExplorer


def test_widget_modules_import_matplotlib_only_when_drawing():
    """The widgets must stay cheap to import (attnlib's __init__ imports them lazily): no module-level import
    of matplotlib or of the plotting module (which imports pyplot) anywhere on their import path."""
    import ast

    for module in ("widgets.py", "render.py", "export.py", "state.py", "inputs.py", "compare.py", "__init__.py"):
        tree = ast.parse((ESM.parent.parent / module).read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.startswith("matplotlib") or n == "plotting"], (module, names)


def test_torch_and_numpy_give_the_same_widget():
    w = maps(11, 11)
    a, b = AttentionHeatmap(w, TOKENS), AttentionHeatmap(w.numpy(), TOKENS)
    assert a._weights == b._weights
    np.testing.assert_allclose(a.weights, w.numpy(), atol=1e-7)
    assert a.key_tokens == a.query_tokens == TOKENS  # self-attention: keys default to the queries


def test_tensor_with_grad_and_bfloat16_accepted():
    w = maps(11, 11).requires_grad_()
    assert AttentionHeatmap(w, TOKENS).weights.shape == (11, 11)
    AttentionHeatmap(maps(3, 5).to(torch.bfloat16), list("abc"), list("vwxyz"))


def test_cross_attention_keeps_both_token_lists():
    w = maps(3, 5)
    hm = AttentionHeatmap(w, ["le", "chat", "dort"], ["the", "cat", "is", "sleeping", "."])
    assert hm.query_tokens == ["le", "chat", "dort"] and hm.key_tokens[-1] == "."
    assert hm._shape == [1, 1, 3, 5]


def test_explorer_accepts_a_list_of_layers():
    layers = [maps(4, 11, 11, seed=i) for i in range(3)]
    ex = AttentionExplorer(layers, TOKENS)
    assert ex._shape == [3, 4, 11, 11]
    np.testing.assert_allclose(ex.weights[2], layers[2].numpy(), atol=1e-7)
    assert ex._layer_names == ["layer 0", "layer 1", "layer 2"]


def test_esm_and_css_come_from_the_package_files():
    hm = AttentionHeatmap(maps(2, 2), ["a", "b"])
    assert hm._esm == ESM.read_text() and ESM.parent.name == "static" and ESM.parent.parent.name == "viz"
    assert hm._css == CSS.read_text()
    assert re.search(r"^\s*import\s", hm._esm, re.M) is None  # no dependency, nothing from a CDN
    assert "export default" in hm._esm


# ---- synced traitlets ----------------------------------------------------------------------

def test_selected_set_from_python_and_observed(heatmap):
    seen = []
    heatmap.observe(lambda change: seen.append((change["old"], change["new"])), names="selected")
    assert heatmap.selected is None
    heatmap.selected = 7
    heatmap.selected = None
    assert seen == [(None, 7), (7, None)]
    assert heatmap.get_state()["selected"] is None


def test_selected_from_the_browser_reaches_python(heatmap):
    seen = []
    heatmap.observe(lambda change: seen.append(change["new"]), names="selected")
    heatmap.set_state({"selected": 3})  # what a click in the view sends over the comm
    assert heatmap.selected == 3 and seen == [3]


@pytest.mark.parametrize("bad", [11, -1, 100])
def test_selected_out_of_range_rejected(heatmap, bad):
    heatmap.selected = 2
    with pytest.raises(ValueError, match=rf"selected must be None or a query index in \[0, 10\], got {bad}"):
        heatmap.selected = bad
    assert heatmap.selected == 2
    with pytest.raises(traitlets.TraitError):  # the same error is a TraitError, so traitlets rolls back
        heatmap.selected = bad


def test_selected_in_constructor_checked():
    assert AttentionHeatmap(maps(11, 11), TOKENS, selected=4).selected == 4
    with pytest.raises(ValueError, match="got 11"):
        AttentionHeatmap(maps(11, 11), TOKENS, selected=11)


def test_explorer_layer_head_bounds(explorer):
    seen = []
    explorer.observe(lambda change: seen.append((change["name"], change["new"])), names=["layer", "head"])
    explorer.layer, explorer.head = 1, 3
    assert seen == [("layer", 1), ("head", 3)]
    with pytest.raises(ValueError, match=r"layer must be in \[0, 1\] \(weights has shape \(2, 4, 11, 11\)\), got 2"):
        explorer.layer = 2
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\].*got -1"):
        explorer.head = -1
    assert (explorer.layer, explorer.head) == (1, 3)
    with pytest.raises(ValueError, match="head must be in"):
        AttentionExplorer(maps(2, 4, 11, 11), TOKENS, head=4)


def test_two_widgets_are_independent():
    a, b = AttentionHeatmap(maps(11, 11), TOKENS), AttentionHeatmap(maps(11, 11, seed=1), TOKENS)
    a.selected = 1
    assert b.selected is None and a.model_id != b.model_id


# ---- input checks ------------------------------------------------------------------------

@pytest.mark.parametrize("weights, match", [
    (maps(2, 11, 11), r"weights must be 2-D \(Lq, Lk\), got shape \(2, 11, 11\) \(3-D\); pick one map"),
    (maps(11), r"weights must be 2-D \(Lq, Lk\), got shape \(11,\) \(1-D\)"),
])
def test_heatmap_needs_2d(weights, match):
    with pytest.raises(ValueError, match=match):
        AttentionHeatmap(weights, TOKENS)


@pytest.mark.parametrize("weights, match", [
    (maps(4, 11, 11), r"must be 4-D \(layers, heads, Lq, Lk\), got shape \(4, 11, 11\) \(3-D\); for one layer pass weights\[None\]"),
    (maps(1, 2, 4, 11, 11), r"got shape \(1, 2, 4, 11, 11\) \(5-D\); squeeze the batch of one: weights\[0\]"),
    ([maps(4, 11, 11), maps(2, 11, 11)], r"weights\[1\] has shape \(2, 11, 11\) but every layer must be 3-D"),
    ([maps(1, 4, 11, 11)], r"squeeze the batch: \[a\[0\] for a in weights\]"),
    ([], "weights is an empty list"),
])
def test_explorer_needs_4d(weights, match):
    with pytest.raises(ValueError, match=match):
        AttentionExplorer(weights, TOKENS)


def test_token_count_mismatch_names_both():
    with pytest.raises(ValueError, match=r"query_tokens has 10 tokens but weights has shape \(11, 11\), i.e. 11 query rows"):
        AttentionHeatmap(maps(11, 11), TOKENS[:10], TOKENS)
    with pytest.raises(ValueError, match=r"key_tokens has 4 tokens but weights has shape \(3, 5\), i.e. 5 key columns"):
        AttentionHeatmap(maps(3, 5), list("abc"), list("abcd"))
    with pytest.raises(ValueError, match=r"key_tokens=None \(self-attention.*3 tokens.*5 key columns; pass key_tokens"):
        AttentionHeatmap(maps(3, 5), list("abc"))
    with pytest.raises(ValueError, match=r"query_tokens has 10 tokens but weights has shape \(2, 4, 11, 11\)"):
        AttentionExplorer(maps(2, 4, 11, 11), TOKENS[:10])


@pytest.mark.parametrize("q, k, match", [
    ([], None, "query_tokens is empty"),
    (["a"], [], "key_tokens is empty"),
    ("it was tired", None, "must be a sequence of tokens, not a single string"),
])
def test_bad_token_lists(q, k, match):
    with pytest.raises(ValueError, match=match):
        AttentionHeatmap(maps(1, 1), q, k)


@pytest.mark.parametrize("value, word", [(float("nan"), "NaN"), (float("inf"), "infinite"), (-float("inf"), "infinite")])
def test_non_finite_values_rejected_even_as_raw_scores(value, word):
    w = maps(11, 11)
    w[3, 5] = value
    for raw in (False, True):
        with pytest.raises(ValueError, match=rf"1 NaN or infinite value\(s\), the first at \(query 3, key 5\)"):
            AttentionHeatmap(w, TOKENS, raw_scores=raw)
    w4 = maps(2, 4, 11, 11)
    w4[1, 2, 3, 4] = value
    with pytest.raises(ValueError, match=r"\(layer 1, head 2, query 3, key 4\)"):
        AttentionExplorer(w4, TOKENS)


def test_rows_must_sum_to_one_unless_raw_scores():
    w = maps(11, 11)
    w[4] *= 0.9
    with pytest.raises(ValueError, match=r"row at \(query 4\) of weights sums to 0.9000, not 1.*raw_scores=True"):
        AttentionHeatmap(w, TOKENS)
    AttentionHeatmap(w, TOKENS, raw_scores=True)
    w4 = maps(2, 4, 11, 11)
    w4[1, 3, 0] *= 2
    with pytest.raises(ValueError, match=r"row at \(layer 1, head 3, query 0\) of weights sums to 2.0000"):
        AttentionExplorer(w4, TOKENS)


def test_row_sum_tolerance():
    w = maps(11, 11, seed=2).double()
    w[0] *= 1 + ROW_SUM_TOL / 2
    AttentionHeatmap(w, TOKENS)
    w[0] *= 1 + 5 * ROW_SUM_TOL
    with pytest.raises(ValueError, match="not 1"):
        AttentionHeatmap(w, TOKENS)


def test_negative_weights_rejected_unless_raw_scores():
    scores = torch.randn(11, 11, generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="negative values.*raw_scores=True"):
        AttentionHeatmap(scores, TOKENS)
    hm = AttentionHeatmap(scores, TOKENS, raw_scores=True)
    assert hm.raw_scores is True
    np.testing.assert_allclose(hm.weights, scores.numpy(), atol=1e-6)


def test_fully_masked_rows_are_allowed():
    w = maps(11, 11)
    w[-2:] = 0.0  # e.g. padding queries whose every key was masked
    AttentionHeatmap(w, TOKENS)


def test_layer_names_and_cmap_checked():
    with pytest.raises(ValueError, match=r"layer_names has 3 names but weights has shape \(2, 4, 11, 11\), i.e. 2 layers"):
        AttentionExplorer(maps(2, 4, 11, 11), TOKENS, layer_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="cmap must be a matplotlib colormap name"):
        AttentionHeatmap(maps(11, 11), TOKENS, cmap="no-such-map")


# ---- reprs and the static fallback ---------------------------------------------------------

def test_stable_text_repr(heatmap, explorer):
    assert repr(heatmap) == "AttentionHeatmap(11 x 11 query x key tokens, selected=None)"
    heatmap.selected = 7
    assert repr(heatmap) == "AttentionHeatmap(11 x 11 query x key tokens, selected=7)"
    explorer.head = 2
    assert repr(explorer) == ("AttentionExplorer(2 layers x 4 heads, 11 x 11 query x key tokens, "
                              "layer=0, head=2, selected=None)")


def png_of(data: dict) -> np.ndarray:
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(data["image/png"]), format="png")


def test_mimebundle_has_widget_png_html_and_plain_text(explorer):
    data, _ = explorer._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == explorer.model_id
    assert data["text/plain"] == repr(explorer) and "0x" not in data["text/plain"]
    image = png_of(data)
    assert image.shape[0] > 200 and image.shape[1] > 400  # a grid of 2 x 4 thumbnails beside the open map
    page = data["text/html"]
    assert "layer 0, head 0" in page and "Static preview" in page and "<script" not in page
    assert base64.b64encode(data["image/png"]).decode() in page  # the same picture, as an <img>


def test_static_png_changes_with_the_state(heatmap):
    before = heatmap._repr_mimebundle_()[0]["image/png"]
    assert heatmap._repr_mimebundle_()[0]["image/png"] == before  # deterministic bytes (no timestamps)
    heatmap.selected = 3  # the pinned row is outlined
    pinned = heatmap._repr_mimebundle_()[0]["image/png"]
    assert pinned != before
    heatmap.selected, heatmap.selected_key = None, 2
    assert heatmap._repr_mimebundle_()[0]["image/png"] not in (before, pinned)


def test_fallback_escapes_tokens():
    hm = AttentionHeatmap(maps(2, 2), ["<pad>", "a&b"], title="<b>x</b>")
    page = hm._repr_mimebundle_()[0]["text/html"]
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_big_map_picture_stays_small():
    n = 512
    hm = AttentionHeatmap(maps(n, n), [f"t{i}" for i in range(n)])
    data = hm._repr_mimebundle_()[0]
    assert len(data["image/png"]) < 200_000  # tens of KB, not megabytes
    assert max(png_of(data).shape[:2]) <= 600


# ---- colour scale, mask, key pin, export -------------------------------------------------------

def two_heads_015_099() -> torch.Tensor:
    """Layer 0: head 0 peaks at 0.15 (nearly uniform over 8 keys), head 1 at 0.99."""
    w = torch.zeros(1, 2, 8, 8)
    w[0, 0] = 0.85 / 7
    w[0, 0].fill_diagonal_(0.15)
    w[0, 1] = 0.01 / 7
    w[0, 1].fill_diagonal_(0.99)
    return w


def test_default_scale_is_shared_by_the_layer():
    ex = AttentionExplorer(two_heads_015_099(), list("abcdefgh"))
    assert ex.scale == "layer"
    assert ex.state.range(0, 0) == ex.state.range(0, 1) == (0.0, pytest.approx(0.99))
    ex.set_scale("map")  # per map, the dim head is stretched to the top colour
    assert ex.state.range(0, 0) == (0.0, pytest.approx(0.15)) and ex.scale == "map"
    ex.set_scale((0, 0.5))
    assert (ex.scale, ex.vmin, ex.vmax) == ("fixed", 0.0, 0.5) and ex.state.range(0, 1) == (0.0, 0.5)


def test_model_scale_spans_every_layer():
    dim = two_heads_015_099()[:, :1]
    w = torch.cat([two_heads_015_099(), torch.cat([dim, dim], dim=1)])  # layer 1: two copies of the dim head
    ex = AttentionExplorer(w, list("abcdefgh"), scale="model")
    assert ex.state.range(1, 0)[1] == pytest.approx(0.99)
    ex.set_scale("layer")
    assert ex.state.range(1, 0)[1] == pytest.approx(0.15)


@pytest.mark.parametrize("scale, match", [
    ("head", r"scale must be one of \('layer', 'map', 'model'\) or a \(vmin, vmax\) pair, got 'head'"),
    ((1, 0), r"vmin < vmax, got \(1.0, 0.0\)"),
    ((0, float("nan")), r"finite with vmin < vmax, got \(0.0, nan\)"),
    ((0, 1, 2), r"a \(vmin, vmax\) pair of numbers, got \(0, 1, 2\)"),
    (("a", "b"), r"pair of numbers, got \('a', 'b'\)"),
])
def test_bad_scale_rejected(scale, match):
    with pytest.raises(ValueError, match=match):
        AttentionHeatmap(maps(3, 3), list("abc"), scale=scale)
    hm = AttentionHeatmap(maps(3, 3), list("abc"))
    with pytest.raises(ValueError, match=match):
        hm.set_scale(scale)
    assert hm.scale == "layer"


def test_vmin_and_vmax_checked_together(heatmap):
    heatmap.set_scale((0.0, 0.5))
    heatmap.set_scale((0.8, 0.9))  # vmin moves above the old vmax: checked once both have changed
    assert (heatmap.vmin, heatmap.vmax) == (0.8, 0.9)
    with pytest.raises(ValueError, match=r"vmin must be below vmax, got vmin=0.95 and vmax=0.9"):
        heatmap.vmin = 0.95
    with pytest.raises(ValueError, match=r"vmax must be a finite number or None, got inf"):
        heatmap.vmax = float("inf")
    with pytest.raises(ValueError, match=r"vmin must be below vmax, got vmin=2.0 and vmax=1.0"):
        heatmap.set_state({"vmin": 2.0, "vmax": 1.0})  # what a page could send
    assert (heatmap.vmin, heatmap.vmax, heatmap.scale) == (0.8, 0.9, "fixed")  # rolled back


def test_scale_trait_checked_from_python_and_browser(heatmap):
    with pytest.raises(ValueError, match=r"scale must be one of .*got 'huge'"):
        heatmap.scale = "huge"
    with pytest.raises(ValueError, match=r"scale='fixed' needs vmin and vmax"):
        heatmap.scale = "fixed"
    heatmap.set_state({"vmin": 0.0, "vmax": 1.0, "scale": "fixed"})  # what the scale menu sends
    assert heatmap.state.range(0, 0) == (0.0, 1.0)


def test_selected_key_synced_and_checked(heatmap):
    seen = []
    heatmap.observe(lambda c: seen.append(c["new"]), names="selected_key")
    heatmap.set_state({"selected_key": 4})
    assert heatmap.selected_key == 4 and seen == [4]
    with pytest.raises(ValueError, match=r"selected_key must be None or a key index in \[0, 10\], got 11"):
        heatmap.selected_key = 11
    with pytest.raises(ValueError, match=r"selected_key must be None or a key index in \[0, 4\], got 5"):
        AttentionHeatmap(maps(3, 5), list("abc"), list("vwxyz"), selected_key=5)


def causal_weights(n: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    scores = torch.randn(n, n, generator=torch.Generator().manual_seed(7)).masked_fill(~allowed, -1e9)
    return scores, allowed


def test_mask_marks_cells_and_is_checked():
    scores, allowed = causal_weights()
    hm = AttentionHeatmap(torch.softmax(scores, -1), list("abcde"), mask=allowed)
    np.testing.assert_array_equal(hm.mask, allowed.numpy())
    assert np.isnan(hm.state.display[0, 0][~allowed.numpy()]).all()
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool \(True = may attend\), got torch.int64"):
        AttentionHeatmap(torch.softmax(scores, -1), list("abcde"), mask=allowed.long())
    with pytest.raises(ValueError, match=r"mask has shape \(5,\) but a 1-D mask is ambiguous here; it must be a 2-D \(Lq, Lk\) = \(5, 5\) mask"):
        AttentionHeatmap(torch.softmax(scores, -1), list("abcde"), mask=allowed[0])
    with pytest.raises(ValueError, match=r"may not attend, but its weight is .*is the mask inverted"):
        AttentionHeatmap(torch.softmax(scores, -1), list("abcde"), mask=~allowed)
    ex = AttentionExplorer(torch.softmax(scores, -1).expand(2, 3, 5, 5), list("abcde"), mask=allowed[None, None])
    assert ex.mask.shape == (2, 3, 5, 5) and not ex.mask[1, 2, 0, 4]
    with pytest.raises(ValueError, match=r"mask has shape \(3, 5, 5\) but .*a 4-D \(layers, heads, Lq, Lk\) = \(2, 3, 5, 5\) mask"):
        AttentionExplorer(torch.softmax(scores, -1).expand(2, 3, 5, 5), list("abcde"), mask=allowed.expand(3, 5, 5))


def test_raw_scores_diverge_around_zero_and_fills_do_not_crush_the_range():
    scores, allowed = causal_weights()
    hm = AttentionHeatmap(scores, list("abcde"), raw_scores=True)  # -1e9 fills, no mask given
    lim = float(scores[allowed].abs().max())
    assert hm.state.range(0, 0) == (pytest.approx(-lim), pytest.approx(lim))  # not (-1e9, ...)
    assert not hm.mask[0, 4] and hm.mask[4, 0] and FILL_BELOW > -1e9
    lut = hm.state.palette.astype(int)
    assert (lut[128] > 230).all() and lut[0, 2] > lut[0, 0] and lut[255, 0] > lut[255, 2]  # white middle, blue low, red high


def test_mask_colour_is_not_in_the_palette():
    for raw in (False, True):
        hm = AttentionHeatmap(causal_weights()[0], list("abcde"), raw_scores=True) if raw else AttentionHeatmap(maps(3, 3), list("abc"))
        dist = np.sqrt(((hm.state.palette.astype(float) - np.array(hm._mask_rgb)) ** 2).sum(1)).min()
        assert dist > 60, (raw, hm._mask_rgb, dist)


def test_to_html_writes_one_self_contained_page(explorer, tmp_path):
    out = explorer.to_html(tmp_path / "explorer.html")
    page = out.read_text()
    assert "export default" not in page and "function render" in page and "attnlib-attn" in page
    assert re.search(r"(src|href)=[\"'](https?:|//)", page) is None  # nothing loaded from elsewhere
    assert base64.b64encode(explorer._weights).decode() in page
    with pytest.raises(ValueError, match=r"path must end in .html or .htm, got '.*explorer.png'"):
        explorer.to_html(tmp_path / "explorer.png")
    with pytest.raises(ValueError, match="the folder of path does not exist"):
        explorer.to_html(tmp_path / "missing" / "explorer.html")



def test_every_output_carries_its_export_and_it_makes_the_same_page(explorer, tmp_path):
    data, _ = explorer._repr_mimebundle_()
    payload = json.loads(json.dumps(data[EXPORT_MIME]))  # survives a notebook's JSON round trip
    assert export_page(payload) == explorer.to_html(tmp_path / "e.html").read_text()
    big = AttentionExplorer(np.full((1, 1, 1100, 1000), 1 / 1000, dtype=np.float32), [str(i) for i in range(1100)],
                            [str(i) for i in range(1000)])
    assert len(big._weights) > PAYLOAD_MAX_BYTES
    data, _ = big._repr_mimebundle_()
    assert EXPORT_MIME not in data and "image/png" in data  # too big to store twice: the picture only


# ---- compare ----------------------------------------------------------------------------------

def test_compare_shares_one_scale_and_links_the_views():
    a, b = maps(2, 3, 11, 11, seed=1), maps(2, 3, 11, 11, seed=2)
    view = compare(a, b, TOKENS, names=("tired", "wide"), layer=1)
    top = float(max(a.max(), b.max()))
    assert view.a.state.range(0, 0) == view.b.state.range(1, 2) == (0.0, pytest.approx(top))  # one scale for A and B
    np.testing.assert_allclose(view.diff.weights, (a - b).numpy(), atol=1e-6)
    assert view.diff.raw_scores and view.diff.state.range(0, 0)[0] == -view.diff.state.range(0, 0)[1]
    view.b.head, view.diff.selected = 2, 4  # as a click in either view would
    assert (view.a.head, view.diff.head, view.a.selected, view.b.selected, view.a.layer) == (2, 2, 4, 4, 1)
    data = view._repr_mimebundle_()[0]
    assert png_of(data).shape[0] > 600 and "tired" in data["text/plain"] and "0x" not in data["text/plain"]


def test_compare_keeps_a_and_b_on_one_scale_whichever_scale_is_picked():
    a, b = maps(2, 3, 11, 11, seed=1), maps(2, 3, 11, 11, seed=2)
    b[1, 2] = torch.eye(11)  # B has one sharp head (peak 1.0) where A's head peaks lower
    view = compare(a, b, TOKENS)
    assert a[1, 2].max() < 0.9 and view.b.state.range(1, 2) == (0.0, 1.0)
    for scale, other in (("layer", "b"), ("map", "a"), ("model", "b"), ((0.0, 0.5), "a")):
        getattr(view, "b" if other == "a" else "a").set_scale(scale)  # the menu of either view
        assert view.a.scale == view.b.scale and view.diff.raw_scores and view.diff.scale == "model"
        for layer in range(2):
            for head in range(3):
                assert view.a.state.range(layer, head) == view.b.state.range(layer, head), (scale, layer, head)
    view.a.set_scale("map")
    assert view.a.state.range(1, 2) == (0.0, 1.0)  # A's head 1.2 is drawn on B's range: dimmer than B's, as it is
    view.b.set_scale((0.8, 0.9))  # a fixed range above the other view's old one reaches it too
    assert (view.a.scale, view.a.vmin, view.a.vmax) == ("fixed", 0.8, 0.9)
    view.diff.view = "lines"  # the view menu of any of the three
    assert view.a.view == view.b.view == "lines"


@pytest.mark.parametrize("kwargs, match", [
    (dict(b=maps(2, 3, 11, 10)), r"a has shape \(2, 3, 11, 11\) but b has shape \(2, 3, 11, 10\)"),
    (dict(names=("a",)), r"names must be two strings, got \('a',\)"),
    (dict(scale="map"), r"compare sets scale itself"),
    (dict(raw_scores=True), r"compare sets raw_scores itself"),
    (dict(a=maps(3, 11, 11), b=maps(3, 11, 11, seed=1)),
     r"a and b must be \(layers, heads, Lq, Lk\) or \(Lq, Lk\), got shape \(3, 11, 11\)"),
])
def test_compare_bad_input(kwargs, match):
    args = dict(a=maps(2, 3, 11, 11), b=maps(2, 3, 11, 11, seed=1), query_tokens=TOKENS) | kwargs
    with pytest.raises(ValueError, match=match):
        compare(**args)


# ---- view, and big explorers sent on demand -----------------------------------------------------

def test_view_is_synced_and_checked(explorer):
    seen = []
    explorer.observe(lambda c: seen.append(c["new"]), names="view")
    assert explorer.view == "map"
    explorer.view = "lines"
    explorer.set_state({"view": "map"})  # what the view menu in the page sends over the comm
    assert seen == ["lines", "map"]
    with pytest.raises(ValueError, match=r"view must be one of \('map', 'lines'\), got 'grid'"):
        explorer.view = "grid"
    assert explorer.view == "map"
    assert AttentionHeatmap(maps(11, 11), TOKENS, view="lines").view == "lines"
    n = LINES_MAX_TOKENS + 1
    with pytest.raises(ValueError, match=rf"at most {LINES_MAX_TOKENS} tokens a side, but the maps are {n} x {n}"):
        AttentionHeatmap(maps(n, n), [str(i) for i in range(n)], view="lines")


def big_explorer(n: int = 300, seed: int = 0, **kwargs) -> AttentionExplorer:
    """6 x 12 x n x n float32 maps: above EAGER_MAX_BYTES for n = 300 (26 MB)."""
    return AttentionExplorer(maps(6, 12, n, n, seed=seed), [f"t{i}" for i in range(n)], **kwargs)


def test_a_big_explorer_sends_the_map_on_display_and_thumbnails_only():
    w = maps(6, 12, 300, 300, seed=1)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(300)], layer=2, head=5)
    assert w.numel() * 4 > EAGER_MAX_BYTES and ex._lazy and ex._weights == b"" and ex._mask == b""
    np.testing.assert_array_equal(np.frombuffer(ex._exact, "<f4"), w[2, 5].numpy().ravel())  # exact, on display
    assert ex._exact_at == [2, 5]
    ex.set_state({"head": 7})  # the page switches head: the kernel answers with that map
    assert ex._exact_at == [2, 7]
    np.testing.assert_array_equal(np.frombuffer(ex._exact, "<f4"), w[2, 7].numpy().ravel())
    sent = len(ex._exact) + len(ex._thumbs)
    assert sent < w.numel() * 4 / 20, sent
    thumbs = np.frombuffer(ex._thumbs, "<f4").reshape(6, 12, 56, 56)
    block = w[4, 3, 0:5, 5:10].numpy()  # thumbnail pixel (0, 1): rows 0..4, columns 5..9 (300 * 1 // 56 = 5)
    assert thumbs[4, 3, 0, 1] == block.max()
    np.testing.assert_array_equal(ex.weights, w.numpy())  # Python still has every exact value
    state = export_state(ex.state)  # no kernel: every map in 8 bits, the one on display exact
    q = np.frombuffer(base64.b64decode(state["binary"]["_weights_u8"]), np.uint8).reshape(6, 12, 300, 300)
    lo, hi = ex._map_lo[4 * 12 + 3], ex._map_hi[4 * 12 + 3]
    np.testing.assert_allclose(lo + q[4, 3] * (hi - lo) / 254, w[4, 3].numpy(), atol=(hi - lo) / 508 + 1e-7)
    assert export_nbytes(ex.state) > PAYLOAD_MAX_BYTES
    assert EXPORT_MIME not in ex._repr_mimebundle_()[0]  # 6.5 MB of 8-bit maps: the picture only


def test_a_big_explorer_keeps_its_mask_as_nan():
    n = 300
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax(torch.randn(6, 12, n, n, generator=torch.Generator().manual_seed(2)).masked_fill(~allowed, -1e9), -1)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(n)], mask=allowed)
    assert ex._lazy and ex._mask == b""
    exact = np.frombuffer(ex._exact, "<f4").reshape(n, n)
    assert np.isnan(exact[0, 1]) and not np.isnan(exact[1, 0])
    np.testing.assert_array_equal(ex.mask[0, 0], allowed.numpy())
    thumbs = np.frombuffer(ex._thumbs, "<f4").reshape(6, 12, 56, 56)
    assert np.isnan(thumbs[0, 0, 0, 55]) and not np.isnan(thumbs[0, 0, 55, 0])  # a block above the diagonal: all masked


# ---- one state object, the constants shared with the page ------------------------------------------

def test_state_carries_what_is_on_display(explorer):
    from attnlib.viz.state import AttentionState

    explorer.layer, explorer.head, explorer.selected, explorer.title = 1, 2, 3, "toy"
    explorer.set_scale("map")
    s = explorer.state
    assert isinstance(s, AttentionState) and s.kind == "explorer" and s.shape == (2, 4, 11, 11)
    assert (s.layer, s.head, s.selected, s.selected_key, s.scale, s.title, s.clip_sink) == (1, 2, 3, None, "map", "toy", False)
    assert s.caption() == "toy: layer 1, head 2 (2 layers x 4 heads, 11 x 11 query x key tokens)"
    np.testing.assert_array_equal(s.weights, explorer.weights)
    assert s.query_tokens == tuple(TOKENS) and s.palette.shape == (256, 3)


def test_the_synced_traits_are_exactly_the_page_model():
    """The widget's synced data and the exported page come from one function (state.page_model): the page of a
    notebook and the page of an export read the same fields, so neither can miss one the other has."""
    from attnlib.viz.state import page_model

    for w in (AttentionHeatmap(maps(3, 5), list("abc"), list("vwxyz")), AttentionExplorer(maps(2, 3, 5, 5), list("abcde")),
              AttentionExplorer(maps(6, 12, 300, 300), [f"t{i}" for i in range(300)])):
        ours = {n for n in w.trait_names(sync=True) if n not in ("_esm", "_css", "_dom_classes", "layout", "tabbable",
                                                                  "tooltip", "_anywidget_id")
                and not n.startswith(("_model", "_view"))}
        fields = page_model(w.state, kernel=True)
        missing = {"layer", "head"} if w._kind == "heatmap" else set()
        missing |= set() if w._lazy else {"_thumbs", "_exact", "_exact_at"}
        assert set(fields) == ours - missing, (type(w).__name__, set(fields) ^ (ours - missing))
        assert all(fields[k] == getattr(w, k) for k in fields), type(w).__name__
        assert set(export_state(w.state)["state"]) | set(export_state(w.state)["binary"]) >= set(fields)


def test_the_numbers_the_page_shares_are_sent_not_copied():
    from attnlib.viz.state import PAGE_CONSTANTS, THUMB, Q8_TOP

    ex = AttentionExplorer(maps(2, 3, 5, 5), list("abcde"))
    assert ex._constants == PAGE_CONSTANTS and PAGE_CONSTANTS["linesMaxTokens"] == LINES_MAX_TOKENS
    js = ESM.read_text()
    for key in PAGE_CONSTANTS:
        assert f"K.{key}" in js, key  # the page reads every shared number from the model...
    code = "\n".join(line.split("//")[0] for line in js.splitlines())
    for number in (THUMB, Q8_TOP, "LINES_MAX ="):
        assert str(number) not in code, number  # ...and keeps no copy of its own
    assert "56px" not in CSS.read_text()  # the thumbnail's size reaches the styles through a CSS variable


# ---- 30 layers x 9 heads (SmolLM2-135M) -----------------------------------------------------------

def smollm_like(n: int = 40, seed: int = 0, sink: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """30 x 9 causal softmax maps; from layer 3 on, a first-token sink takes 0.5-0.9 of every row (as
    SmolLM2 does, issue 22); random otherwise (no model needed). And the causal mask."""
    g = torch.Generator().manual_seed(seed)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.softmax((2 * torch.randn(30, 9, n, n, generator=g)).masked_fill(~allowed, -1e9), -1)
    if sink:
        share = 0.5 + 0.4 * torch.rand(27, 9, 1, 1, generator=g)                 # (27, 9, 1, 1)
        w[3:] = w[3:] * (1 - share)
        w[3:, :, :, 0] += share[..., 0]
    return w, allowed


def test_30_by_9_explorer_one_scale_per_layer():
    g = torch.Generator().manual_seed(5)
    sharp = torch.linspace(0.5, 4.0, 30).reshape(30, 1, 1, 1)                     # later layers peak higher
    w = torch.softmax(sharp * torch.randn(30, 9, 40, 40, generator=g), -1)     # (30, 9, 40, 40)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(40)], layer=29, head=8)
    assert ex._shape == [30, 9, 40, 40] and not ex._lazy and len(ex._layer_names) == 30
    top = w.amax(dim=(1, 2, 3))                                                 # (30,): each layer's largest weight
    for layer in range(30):
        for h in range(9):
            assert ex.state.range(layer, h) == (0.0, pytest.approx(float(top[layer]))), (layer, h)
    assert len({round(float(t), 6) for t in top}) == 30                        # 30 different scales, one per layer
    ex.set_scale("model")
    assert ex.state.range(5, 5) == ex.state.range(29, 0) == (0.0, pytest.approx(float(top.max())))


def test_clip_sink_gives_the_rest_of_the_map_its_colours_back():
    """A sink column taking 0.7 of every row and a previous-token pattern taking 0.25: on the layer's linear
    scale the pattern sits in the bottom third of the palette; with clip_sink it reaches the top colour."""
    n = 12
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.zeros(30, 9, n, n)
    for i in range(n):
        w[:, :, i, : i + 1] = 0.05 / (i + 1)                                     # a little everywhere it may look
        w[:, :, i, 0] += 0.7                                                     # the sink
        w[:, :, i, max(i - 1, 0)] += 0.25                                        # the previous token
    ex = AttentionExplorer(w, [f"t{i}" for i in range(n)], mask=allowed, layer=18, head=6)
    before = ex._repr_mimebundle_()[0]["image/png"]
    prev = torch.tensor([float(w[18, 6, i, i - 1]) for i in range(2, n)])
    lo, hi = ex.state.range(18, 6)
    assert (prev / hi).max() < 0.34, (prev.max(), hi)                           # dim on the linear scale
    sink_column = torch.tensor(ex._map_rest[18 * 9 + 6])
    assert torch.isclose(sink_column, w[18, 6, :, 1:].max())                    # the top ignores column 0
    ex.clip_sink = True
    lo, hi = ex.state.range(18, 6)
    assert (lo, hi) == (0.0, pytest.approx(float(w[18, 6, :, 1:].max())))
    assert (prev / hi).min() > 0.9                                              # the pattern is near the top colour
    assert float(w[18, 6, 5, 0]) > hi                                           # the sink saturates (drawn at the top)
    assert ex._repr_mimebundle_()[0]["image/png"] != before                    # the static picture follows


def test_clip_sink_leaves_out_the_first_query_of_a_causal_map():
    """The first query of a causal map may see key 0 only, so its weight there is 1 in every head. In a head
    whose heaviest column is not key 0 (here: the previous token), that 1 used to set the clipped top; rows
    that the mask lets see one key only are now left out, so the top is the head's own largest weight."""
    n = 10
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    w = torch.zeros(1, 2, n, n)
    for i in range(n):
        w[0, :, i, : i + 1] = 0.4 / (i + 1)                                      # a little everywhere it may look
        w[0, 0, i, 0] += 0.6                                                     # head 0: a sink on key 0
        w[0, 1, i, min(i, 2)] += 0.6                                             # head 1: key 2, once it is seen
    ex = AttentionExplorer(w, [f"t{i}" for i in range(n)], mask=allowed, scale="map", clip_sink=True)
    assert float(w[0, 1, 0, 0]) == pytest.approx(1.0) and ex._map_hi[1] == pytest.approx(1.0)
    assert int(w[0, 1].sum(0).argmax()) == 2                                     # its heaviest column is not key 0
    rest = w[0, 1, 1:].clone()                                                   # rows 1.. (row 0 sees one key)
    rest[:, 2] = 0                                                               # without the heaviest column
    assert ex.state.range(0, 1) == (0.0, pytest.approx(float(rest.max())))
    assert ex.state.range(0, 1)[1] < 0.9                                         # not 1: the first row is left out
    assert ex.state.range(0, 0) == (0.0, pytest.approx(float(w[0, 0, :, 1:].max())))   # the sink head as before
    unmasked = AttentionExplorer(w, [f"t{i}" for i in range(n)], scale="map", clip_sink=True)
    assert unmasked.state.range(0, 1)[1] == pytest.approx(1.0)                  # without the mask, row 0 has n cells


def test_clip_sink_is_synced_shared_by_compare_and_symmetric_for_raw_scores():
    ex = AttentionExplorer(maps(2, 3, 5, 5), list("abcde"))
    ex.set_state({"clip_sink": True})  # what the page's box sends
    assert ex.clip_sink is True and ex.get_state()["clip_sink"] is True
    scores = torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(4))
    scores[..., 2] += 6.0  # a key that every query scores high
    raw = AttentionExplorer(scores, list("abcde"), raw_scores=True, scale="map", clip_sink=True)
    lo, hi = raw.state.range(1, 1)
    assert lo == -hi and hi == pytest.approx(float(scores[1, 1][:, [0, 1, 3, 4]].abs().max()))
    view = compare(maps(2, 3, 5, 5, seed=1), maps(2, 3, 5, 5, seed=2), list("abcde"))
    assert view.a._map_rest == view.b._map_rest
    view.b.clip_sink = True
    assert view.a.clip_sink and not view.diff.clip_sink
    assert view.a.state.range(1, 2) == view.b.state.range(1, 2)


def test_30_by_9_data_sent_stays_within_the_budgets():
    """40 tokens: 1.7 MB of float32, sent whole and exported whole. 128 tokens: 17.7 MB, above EAGER_MAX_BYTES,
    so the page gets thumbnails and one map (3.5 MB, the same bound as the 6 x 12 x 512 explorer's) and the
    export, 4.4 MB in 8 bits, is left to the picture."""
    w, allowed = smollm_like(40)
    small = AttentionExplorer(w, [f"t{i}" for i in range(40)], mask=allowed)
    assert len(small._weights) == 30 * 9 * 40 * 40 * 4 <= EAGER_MAX_BYTES and not small._lazy
    assert export_nbytes(small.state) <= PAYLOAD_MAX_BYTES and EXPORT_MIME in small._repr_mimebundle_()[0]
    w, allowed = smollm_like(128, seed=1)
    big = AttentionExplorer(w, [f"t{i}" for i in range(128)], mask=allowed, layer=18, head=6)
    assert big._lazy and big._weights == b"" and big._exact_at == [18, 6]
    sent = sum(len(getattr(big, k)) for k in ("_weights", "_mask", "_palette", "_thumbs", "_exact"))
    assert sent == 30 * 9 * 56 * 56 * 4 + 128 * 128 * 4 + 256 * 3 and sent < 4_000_000
    big.set_state({"layer": 3})  # the page opens another layer: one map, 64 KB
    assert big._exact_at == [3, 6] and len(big._exact) == 128 * 128 * 4
    assert export_nbytes(big.state) > PAYLOAD_MAX_BYTES
    data = big._repr_mimebundle_()[0]
    assert EXPORT_MIME not in data and len(data["image/png"]) < 200_000


def test_30_by_9_picture_puts_the_grid_under_the_map_layers_along_x():
    w, allowed = smollm_like(40)
    ex = AttentionExplorer(w, [f"t{i}" for i in range(40)], mask=allowed, layer=18, head=6, selected=5)
    tall = png_of(ex._repr_mimebundle_()[0])
    assert 700 <= tall.shape[1] <= 1300 and 600 <= tall.shape[0] <= 1000, tall.shape  # about 1000 x 850, not 2 m tall
    few = png_of(AttentionExplorer(w[:6], [f"t{i}" for i in range(40)], mask=allowed)._repr_mimebundle_()[0])
    assert few.shape[1] > few.shape[0]  # 6 layers: the grid beside the map, as before


def test_a_payload_stored_before_viz_still_makes_a_page(explorer):
    """Notebooks executed before attnlib.viz carry exports without _constants, _map_rest and clip_sink; the
    static site must still draw them, with the numbers from Python (the page keeps no copy)."""
    old = json.loads(json.dumps(export_state(explorer.state)))
    for name in ("_constants", "_map_rest", "clip_sink"):
        del old["state"][name]
    page = export_page(old)
    state = json.loads(re.search(r'id="attnlib-state" type="application/json">(.*?)</script>', page).group(1))
    assert state["_constants"]["thumb"] == 56 and state["_map_rest"] == old["state"]["_map_hi"]
    new = export_state(explorer.state)
    assert json.loads(re.search(r'id="attnlib-state" type="application/json">(.*?)</script>', export_page(new)).group(1)) == \
        json.loads(json.dumps(new["state"]))  # a new payload goes through unchanged


@pytest.mark.parametrize("heads", [1, 2, 9])
def test_static_grid_title_fits_beside_the_map(heads):
    """The grid's title ("every layer x head; one colour scale ...") is wrapped to the grid's width: with one or two
    heads it was one long line that ran under the map beside it and was cut off in the picture."""
    from attnlib.viz.render import static_figure

    w = torch.softmax(torch.randn(2, heads, 6, 6, generator=torch.Generator().manual_seed(0)), -1)
    fig = static_figure(AttentionExplorer(w, list("abcdef"), list("abcdef"), scale="model").state)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)  # the constrained layout places the axes when the figure is drawn
    grid, target = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"][:2]
    title = grid.title.get_window_extent(renderer)
    assert title.x1 <= target.get_window_extent(renderer).x0, (title, target.get_window_extent(renderer))
    assert "one colour scale for the whole model" in grid.title.get_text().replace("\n", " ")
