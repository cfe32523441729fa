"""Tests of attnlib/training.py: metrics on hand-checked examples, schedules, History, progress bars, and that
training learns."""
import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from attnlib import (AdditiveAttention, AttentionDecoder, Encoder, History, Seq2Seq, evaluate_seq2seq,
                     make_reversal, progress_bar, seed_everything, sequence_accuracy, teacher_forcing_ratio,
                     token_accuracy, train_seq2seq)


def test_accuracies_hand_checked():
    target = torch.tensor([[5, 6, 2, 0], [7, 8, 9, 2]])
    pred = torch.tensor([[5, 6, 2, 9], [7, 3, 9, 2]])  # row 0 right (pad ignored), row 1 one token wrong
    assert token_accuracy(pred, target, pad_id=0) == pytest.approx(6 / 7)
    assert sequence_accuracy(pred, target, pad_id=0) == pytest.approx(0.5)
    short = torch.tensor([[5, 6], [7, 8]])  # missing predictions count as wrong
    assert token_accuracy(short, target, 0) == pytest.approx(4 / 7)
    assert sequence_accuracy(short, target, 0) == 0.0
    long = torch.cat([target, torch.full((2, 3), 4)], 1)  # extra predictions are cut
    assert token_accuracy(long, target, 0) == 1.0 and sequence_accuracy(long, target, 0) == 1.0
    with pytest.raises(ValueError, match="same B"):
        token_accuracy(pred[:1], target, 0)


def test_teacher_forcing_schedule():
    assert teacher_forcing_ratio(0, 1.0, 0.5, 0.1) == 1.0
    assert teacher_forcing_ratio(2, 1.0, 0.5, 0.1) == 0.25
    assert teacher_forcing_ratio(10, 1.0, 0.5, 0.1) == 0.1
    with pytest.raises(ValueError, match="floor"):
        teacher_forcing_ratio(0, 1.0, 0.5, 2.0)


def test_history():
    h = History()
    h.log(epoch=1, loss=2.0, token_acc=0.5)
    h.log(epoch=2, loss=1.0, token_acc=torch.tensor(0.75))
    assert h["loss"] == [2.0, 1.0] and h.last("token_acc") == 0.75 and "loss" in h
    assert h.as_dict() == {"epoch": [1.0, 2.0], "loss": [2.0, 1.0], "token_acc": [0.5, 0.75]}
    with pytest.raises(KeyError, match="token_acc"):
        h["acc"]
    fig = h.plot()
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 1
    assert [a.get_title() for a in fig.axes] == ["loss", "accuracy"]
    ax = h.plot(keys=["token_acc"])
    assert list(ax.lines[0].get_ydata()) == [0.5, 0.75] and list(ax.lines[0].get_xdata()) == [1.0, 2.0]


def test_history_plot_draws_through_plot_curves(monkeypatch):
    """One plotting code path: History.plot must not keep a copy of plot_curves."""
    import attnlib.plotting

    calls = []
    real = attnlib.plotting.plot_curves
    monkeypatch.setattr(attnlib.plotting, "plot_curves", lambda *a, **k: calls.append(k.get("keys")) or real(*a, **k))
    h = History()
    for epoch in (1, 2, 3):
        h.log(epoch=epoch, loss=1.0 / epoch, token_acc=0.2 * epoch, eval_token_acc=0.1 * epoch)
    h.plot()
    h.plot(["loss"])
    assert calls == [["loss"], ["token_acc", "eval_token_acc"], ["loss"]]
    with pytest.raises(ValueError, match="no metric named like a loss or an accuracy"):
        only_lr = History()
        only_lr.log(epoch=1, lr=0.1)
        only_lr.plot()


def test_seed_everything_repeats_the_draws_and_says_what_it_cannot_fix():
    import random

    import numpy as np

    def draws():
        return random.random(), float(np.random.rand()), torch.rand(2).tolist()

    seed_everything(5)
    first = draws()
    seed_everything(5)
    assert draws() == first
    seed_everything(6)
    assert draws() != first
    doc = seed_everything.__doc__  # it used to promise exact repeats while setting PYTHONHASHSEED too late
    assert "never" in doc and "running interpreter" in doc and "PYTHONHASHSEED" in doc


def test_seed_everything_fixes_the_hash_seed_of_child_processes_only():
    import subprocess
    import sys

    seed_everything(3)
    child = lambda: subprocess.run([sys.executable, "-c", "print(hash('attention'))"],  # noqa: E731
                                   capture_output=True, text=True, check=True).stdout
    assert child() == child()  # both children start with PYTHONHASHSEED=3


def test_tiny_reversal_model_learns():
    train = make_reversal(256, (3, 5), vocab_size=6, seed=0)
    held_out = make_reversal(128, (3, 5), vocab_size=6, seed=1)
    seed_everything(0)
    V = len(train.src_vocab)
    m = Seq2Seq(Encoder(V, 16, 32), AttentionDecoder(V, 16, 32, 32, AdditiveAttention(32, 32, 32)))
    before = evaluate_seq2seq(m, train)
    h = train_seq2seq(m, train, epochs=25, lr=1e-2, batch_size=32, teacher_forcing=(1.0, 0.9, 0.5),
                      eval_data=held_out, progress=False)
    assert h["loss"][-1] < 0.3 * h["loss"][0]
    assert h["teacher_forcing"][:3] == pytest.approx([1.0, 0.9, 0.81]) and h["teacher_forcing"][-1] == 0.5
    after = evaluate_seq2seq(m, train)
    assert before["token_acc"] < 0.5 and after["token_acc"] > 0.95 and after["seq_acc"] > 0.8
    # sequences it never saw (the logged eval metrics are free-running, on held_out)
    assert h["eval_token_acc"][0] < h["eval_token_acc"][-1] and h["eval_token_acc"][-1] > 0.9
    beam = evaluate_seq2seq(m, train, beam_size=3)
    assert beam["token_acc"] > 0.9


def test_progress_bar_is_plain_tqdm_outside_a_notebook():
    from tqdm.std import tqdm as console_tqdm

    bar = progress_bar(range(3), desc="x", disable=True)
    assert isinstance(bar, console_tqdm) and list(bar) == [0, 1, 2]


def test_progress_bar_saved_output_shows_the_final_state():
    """Run a real kernel: the saved output of a finished bar reads 100%; plain tqdm's reads 0%."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [
        nbformat.v4.new_code_cell("import attnlib\nfor _ in attnlib.progress_bar(range(5), desc='outer'):\n"
                                  "    for _ in attnlib.progress_bar(range(3), desc='inner', leave=False):\n"
                                  "        pass"),
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(4), desc='plain'):\n    pass"),
    ]
    NotebookClient(nb, kernel_name="python3", timeout=60).execute()
    ours = [o["data"]["text/plain"] for o in nb.cells[0].outputs]
    plain = [o["data"]["text/plain"] for o in nb.cells[1].outputs]
    assert ours[0].startswith("outer: 100%|") and "5/5" in ours[0]
    assert ours[1:] == [""] * 5  # leave=False: each inner bar's output is emptied
    assert plain[0].startswith("plain:   0%|")  # what a saved notebook kept before: the bar as it appeared
