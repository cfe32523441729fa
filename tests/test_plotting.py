"""Tests of attnlib/viz/plotting.py: what is drawn (labels, colour range, lines) and the errors."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from attnlib import plot_curves, plot_heads, plot_heatmap


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_heatmap_draws_the_weights_with_token_labels():
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plot_heatmap(w, ["a", "b", "c"], ["w", "x", "y", "z"], title="t")
    assert np.allclose(ax.images[0].get_array(), w.numpy())  # rows = queries, columns = keys
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "t"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")
    assert ax.images[0].get_clim() == (0, pytest.approx(w.max().item()))
    assert len(ax.figure.axes) == 2  # the map and its colorbar


def test_heatmap_accepts_numpy_grad_tensors_and_an_existing_axes():
    fig, ax = plt.subplots()
    w = torch.rand(2, 2, requires_grad=True)
    assert plot_heatmap(w, ax=ax, vmax=1.0, colorbar=False) is ax
    assert ax.images[0].get_clim() == (0, 1.0)
    assert len(fig.axes) == 1
    assert np.allclose(ax.images[0].get_array(), w.detach().numpy())
    ax = plot_heatmap(np.eye(3))  # a NumPy array
    assert np.array_equal(ax.images[0].get_array(), np.eye(3)) and ax.images[0].get_clim() == (0, 1.0)


def test_heatmap_rotates_long_key_labels_only():
    ax = plot_heatmap(np.eye(2), ["a", "b"], ["a", "b"])
    assert ax.get_xticklabels()[0].get_rotation() == 0
    ax = plot_heatmap(np.eye(2), ["a", "b"], ["elephant", "b"])
    assert ax.get_xticklabels()[0].get_rotation() == 90


def test_heatmap_annotates_each_cell():
    ax = plot_heatmap(np.array([[0.25, 0.75]]), annotate=True)
    assert sorted(t.get_text() for t in ax.texts) == ["0.25", "0.75"]


def test_heatmap_errors_name_the_shapes():
    with pytest.raises(ValueError, match=r"weights must be 2-D \(Lq, Lk\), got shape \(2, 3, 4\)"):
        plot_heatmap(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match=r"query_tokens has 2 tokens but weights has shape \(3, 4\)"):
        plot_heatmap(torch.rand(3, 4), ["a", "b"], list("wxyz"))
    with pytest.raises(ValueError, match=r"key_tokens has 3 tokens but weights has shape \(3, 4\)"):
        plot_heatmap(torch.rand(3, 4), list("abc"), list("xyz"))
    with pytest.raises(ValueError, match="single string"):
        plot_heatmap(torch.rand(3, 3), "abc")
    with pytest.raises(ValueError, match="must be a torch.Tensor or a NumPy array"):
        plot_heatmap([["a", "b"]])


def test_heads_grid_shares_one_colour_scale():
    w = torch.softmax(torch.randn(5, 3, 3), dim=-1)
    fig = plot_heads(w, list("abc"), list("abc"), ncols=2, suptitle="all heads")
    maps = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in maps] == [f"head {i}" for i in range(5)]
    assert all(ax.images[0].get_clim() == (0, pytest.approx(w.max().item())) for ax in maps)
    assert np.allclose(maps[3].images[0].get_array(), w[3].numpy())
    assert len(fig.axes) == 2 * 3 + 1  # a 3x2 grid (one cell unused) + one colorbar
    assert fig._suptitle.get_text() == "all heads"


def test_heads_without_shared_scale_gets_a_colorbar_each():
    fig = plot_heads(np.random.rand(2, 3, 3), share_scale=False, titles=["first", "second"])
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes if ax.get_title()] == ["first", "second"]


def test_heads_errors():
    with pytest.raises(ValueError, match=r"weights must be 3-D \(h, Lq, Lk\), got shape \(1, 2, 3, 3\).*weights\[b\]"):
        plot_heads(torch.rand(1, 2, 3, 3))
    with pytest.raises(ValueError, match=r"titles has 1 entries but weights has shape \(2, 3, 3\)"):
        plot_heads(torch.rand(2, 3, 3), titles=["x"])
    with pytest.raises(ValueError, match=r"key_tokens has 2 tokens but weights has shape \(2, 3, 3\)"):
        plot_heads(torch.rand(2, 3, 3), list("abc"), list("ab"))


class FakeHistory:
    """Stands in for a History class that is not a Mapping but converts to one."""

    def as_dict(self):
        return {"loss": [3.0, 2.0, 1.0]}


def test_curves_of_one_run_and_of_several_runs():
    ax = plot_curves({"loss": [1.0, 0.5, 0.25], "acc": torch.tensor([0.1, 0.5, 0.9])})
    assert [line.get_label() for line in ax.lines] == ["loss", "acc"]
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    assert list(ax.lines[1].get_ydata()) == pytest.approx([0.1, 0.5, 0.9])

    runs = {"small": {"loss": [2, 1], "acc": [0.5, 0.6]}, "big": FakeHistory()}
    ax = plot_curves(runs, keys="loss", xlabel="epoch")
    assert [line.get_label() for line in ax.lines] == ["small", "big"]
    assert ax.get_ylabel() == "loss" and ax.get_xlabel() == "epoch"
    assert ax.lines[0].get_color() != ax.lines[1].get_color()


def test_one_run_gets_a_colour_per_metric():
    ax = plot_curves({"loss": [1.0, 0.5], "acc": [0.2, 0.4], "eval_acc": [0.1, 0.3]})
    colours = [line.get_color() for line in ax.lines]
    assert len(set(colours)) == 3 and {line.get_linestyle() for line in ax.lines} == {"-"}


def test_curves_use_an_x_metric_when_present():
    ax = plot_curves({"step": [10, 20], "loss": [1.0, 0.5]}, xlabel="step")
    assert [line.get_label() for line in ax.lines] == ["loss"]
    assert list(ax.lines[0].get_xdata()) == [10, 20]


def test_curves_errors():
    with pytest.raises(ValueError, match="has no metric 'acc'"):
        plot_curves({"a": {"loss": [1]}}, keys=["acc"])
    with pytest.raises(ValueError, match="mixes lists and runs"):
        plot_curves({"loss": [1], "run": {"loss": [1]}})
    with pytest.raises(ValueError, match="empty"):
        plot_curves({})
    with pytest.raises(ValueError, match="must be a mapping"):
        plot_curves([1, 2, 3])
    with pytest.raises(ValueError, match="'step' has 3 values but 'loss' has 2"):
        plot_curves({"step": [1, 2, 3], "loss": [1.0, 0.5]}, xlabel="step")


def test_curves_accept_attnlib_history():
    from attnlib.training import History

    runs = {}
    for name, scale in (("a", 1.0), ("b", 2.0)):
        h = History()
        for epoch in (1, 2, 3):
            h.log(epoch=epoch, loss=scale / epoch, token_acc=0.3 * epoch)
        runs[name] = h
    ax = plot_curves(runs, keys=["loss"])
    assert [line.get_label() for line in ax.lines] == ["a", "b"]
    assert list(ax.lines[1].get_ydata()) == pytest.approx([2.0, 1.0, 2 / 3])
    ax = plot_curves(runs["a"])  # one History: every metric except the x axis
    assert [line.get_label() for line in ax.lines] == ["loss", "token_acc"]
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]


def test_plot_history_draws_a_history_through_plot_curves(monkeypatch):
    """One plotting code path: plot_history must not keep a copy of plot_curves."""
    import attnlib.viz.plotting as plotting
    from attnlib import History, plot_history

    h = History()
    h.log(epoch=1, loss=2.0, token_acc=0.5)
    h.log(epoch=2, loss=1.0, token_acc=0.75)
    fig = plot_history(h)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 1
    assert [a.get_title() for a in fig.axes] == ["loss", "accuracy"]
    ax = plot_history(h, keys=["token_acc"])
    assert list(ax.lines[0].get_ydata()) == [0.5, 0.75] and list(ax.lines[0].get_xdata()) == [1.0, 2.0]
    calls = []
    real = plotting.plot_curves
    monkeypatch.setattr(plotting, "plot_curves", lambda *a, **k: calls.append(k.get("keys")) or real(*a, **k))
    h.log(epoch=3, loss=0.5, token_acc=0.8)
    plot_history(h)
    plot_history(h, ["loss"])
    assert calls == [["loss"], ["token_acc"], ["loss"]]
    only_lr = History()
    only_lr.log(epoch=1, lr=0.1)
    with pytest.raises(ValueError, match="no metric named like a loss or an accuracy"):
        plot_history(only_lr)
