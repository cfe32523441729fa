"""Tests of attnlib/training.py: metrics on hand-checked examples, schedules, History, progress bars, that
train_seq2seq learns, and that train_steps gives exactly the weights of the notebooks' own loops."""
import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from attnlib import (AdditiveAttention, AttentionDecoder, Encoder, History, Seq2Seq, TaggerConfig, TransformerTagger,
                     evaluate, make_reversal, make_sort_batch, previous_digit_batch, progress_bar, seed_everything,
                     sequence_accuracy, teacher_forcing_ratio, token_accuracy, train_seq2seq, train_steps)


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
    with pytest.raises(ValueError, match="floor must be a number between 0 and 1, got 2.0"):
        teacher_forcing_ratio(0, 1.0, 0.5, 2.0)


def test_history():
    h = History()
    h.log(epoch=1, loss=2.0, token_acc=0.5)
    h.log(epoch=2, loss=1.0, token_acc=torch.tensor(0.75))
    assert h["loss"] == [2.0, 1.0] and h.last("token_acc") == 0.75 and "loss" in h
    assert h.as_dict() == {"epoch": [1.0, 2.0], "loss": [2.0, 1.0], "token_acc": [0.5, 0.75]}
    with pytest.raises(KeyError, match="token_acc"):
        h["acc"]


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
    before = evaluate(m, train)
    h = train_seq2seq(m, train, epochs=25, lr=1e-2, batch_size=32, teacher_forcing=(1.0, 0.9, 0.5),
                      eval_data=held_out, progress=False)
    assert h["loss"][-1] < 0.3 * h["loss"][0]
    assert h["teacher_forcing"][:3] == pytest.approx([1.0, 0.9, 0.81]) and h["teacher_forcing"][-1] == 0.5
    assert not m.training  # left in eval mode
    after = evaluate(m, train)
    assert before["token_acc"] < 0.5 and after["token_acc"] > 0.95 and after["seq_acc"] > 0.8
    # sequences it never saw (the logged eval metrics are free-running, on held_out)
    assert h["eval_token_acc"][0] < h["eval_token_acc"][-1] and h["eval_token_acc"][-1] > 0.9
    beam = evaluate(m, train, beam_size=3)
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


def test_train_seq2seq_refuses_a_schedule_it_does_not_know():
    m = Seq2Seq(Encoder(8, 4, 8), AttentionDecoder(8, 4, 8, 8, AdditiveAttention(8, 8, 8)))
    with pytest.raises(ValueError, match="schedule must be 'onecycle' or 'constant', got 'cosine'"):
        train_seq2seq(m, make_reversal(8, 3, vocab_size=5), epochs=1, schedule="cosine", progress=False)


def test_train_seq2seq_with_weight_decay_uses_adamw_and_without_it_adam():
    """weight_decay=0 must be exactly Adam (the optimizer notebook 01 writes by hand); > 0 decays the weights."""
    data = make_reversal(64, 4, vocab_size=5, seed=0)

    def trained(weight_decay):
        seed_everything(0)
        m = Seq2Seq(Encoder(8, 4, 8), AttentionDecoder(8, 4, 8, 8, AdditiveAttention(8, 8, 8)))
        train_seq2seq(m, data, epochs=2, lr=1e-2, batch_size=16, weight_decay=weight_decay, progress=False)
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    seed_everything(0)
    m = Seq2Seq(Encoder(8, 4, 8), AttentionDecoder(8, 4, 8, 8, AdditiveAttention(8, 8, 8)))
    torch.manual_seed(0)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2, fused=True)  # as notebook 01 writes it
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=8)
    from attnlib import batches
    for epoch in (1, 2):
        for b in batches(data, 16, seed=epoch):
            loss = F.cross_entropy(m(b.src, b.tgt, b.src_key_padding_mask).flatten(0, 1), b.tgt.flatten(), ignore_index=0)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            sched.step()
    by_hand = torch.cat([p.detach().flatten() for p in m.parameters()])
    assert torch.equal(trained(0.0), by_hand)
    assert not torch.equal(trained(0.1), by_hand)


# ------------------------------------------------------------------ train_steps against the notebooks' loops

L05 = 12


def neighbours_batch(n, generator):
    """Notebook 05's task: each digit's left and right neighbour (class 10 = none), targets (n, L, 2)."""
    x = torch.randint(0, 10, (n, L05), generator=generator)
    edge = torch.full((n, 1), 10)
    return x, torch.stack([torch.cat([edge, x[:, :-1]], 1), torch.cat([x[:, 1:], edge], 1)], dim=-1)


def tagger(seed, num_outputs, max_len, **kw):
    seed_everything(seed)
    return TransformerTagger(TaggerConfig(vocab_size=11, num_outputs=num_outputs, d_model=16, num_heads=2,
                                          num_layers=1, d_ff=32, max_len=max_len, **kw))


def weights(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_train_steps_gives_bit_identical_weights_to_notebook_05s_loop():
    """A copy of notebook 05's train_tagger (AdamW 1e-3, constant rate, batches of 128 from seed + 1, two targets per
    position): train_steps with the same seed ends with exactly the same weights."""
    seed, steps = 3, 12
    model = tagger(seed, 2 * 11, L05)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # as notebook 05 writes it
    data = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        x, y = neighbours_batch(128, data)
        logits = model(x).view(128, L05, 2, 11)  # (batch, L, targets, classes)
        loss = F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    ours = tagger(seed, 2 * 11, L05)
    history = train_steps(ours, neighbours_batch, steps, lr=1e-3, batch_size=128, seed=seed + 1, schedule="constant",
                          progress=False)
    assert torch.equal(weights(ours), weights(model))
    assert history["loss"] == losses and history["step"] == list(range(1, steps + 1))
    assert not ours.training and history["lr"] == [1e-3] * steps


def test_train_steps_gives_bit_identical_weights_to_notebook_06s_cosine_loop():
    """A copy of notebook 06's train (AdamW, cosine LambdaLR, ignore_index -100 at position 0)."""
    steps, lr = 10, 2e-3
    model = tagger(1, 10, 12)
    generator = torch.Generator().manual_seed(101)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    accuracy = []
    model.train()
    for _ in range(steps):
        tokens, targets = previous_digit_batch(64, generator)
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        valid = targets != -100
        accuracy.append(((logits.argmax(-1) == targets) & valid).sum().item() / valid.sum().item())

    ours = tagger(1, 10, 12)
    history = train_steps(ours, previous_digit_batch, steps, lr=lr, batch_size=64, seed=101, progress=False)
    assert torch.equal(weights(ours), weights(model))
    assert history["token_acc"] == pytest.approx(accuracy, abs=1e-12)


def test_train_steps_warm_up_and_padding_as_in_notebook_07():
    """The learning rate follows notebook 07's factor (linear warm-up times a cosine), and a batch maker that returns
    a padding mask has it passed as key_padding_mask: the pads get no loss and do not count in the accuracies."""
    steps, warmup, lr = 8, 3, 1e-2
    seen = []

    class Probe(TransformerTagger):
        def forward(self, tokens, mask=None, return_attention=False, key_padding_mask=None):
            seen.append(key_padding_mask)
            return super().forward(tokens, mask, return_attention, key_padding_mask)

    seed_everything(0)
    model = Probe(TaggerConfig(vocab_size=11, num_outputs=10, d_model=16, num_heads=2, num_layers=1, d_ff=32,
                               max_len=12))
    history = train_steps(model, lambda n, g: make_sort_batch(n, g, max_len=8), steps, lr=lr, batch_size=16,
                          warmup=warmup, seed=5, progress=False)
    factor = [min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / steps)) for s in range(1, steps + 1)]
    assert history["lr"] == pytest.approx([lr * f for f in factor], rel=1e-12)  # the rate after each step
    expected = make_sort_batch(16, torch.Generator().manual_seed(5), max_len=8)[2]
    assert torch.equal(seen[0], expected)  # the first batch's padding mask
    assert 0.0 <= min(history["seq_acc"]) and max(history["token_acc"]) <= 1.0


def test_train_steps_passes_a_fixed_mask_and_refuses_bad_arguments():
    masks = []

    class Causal(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10)

        def forward(self, tokens, mask=None):
            masks.append(mask)
            return self.head(self.embed(tokens))

    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    train_steps(Causal(), previous_digit_batch, 2, mask=causal, progress=False)
    assert all(m is causal for m in masks)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        train_steps(Causal(), previous_digit_batch, 0)
    with pytest.raises(ValueError, match="schedule must be 'cosine' or 'constant', got 'onecycle'"):
        train_steps(Causal(), previous_digit_batch, 2, schedule="onecycle")
    with pytest.raises(ValueError, match=r"warmup must be a number of steps \(an int >= 0\), got -1"):
        train_steps(Causal(), previous_digit_batch, 2, warmup=-1)
    odd = lambda n, g: (torch.zeros(n, 12, dtype=torch.long), torch.zeros(n, 7, dtype=torch.long))  # noqa: E731
    with pytest.raises(ValueError, match=r"logits has shape \(64, 12, 10\) and targets \(64, 7\)"):
        train_steps(Causal(), odd, 1, progress=False)


def test_history_of_steps_plots_against_the_step():
    h = History()
    for step in (1, 2, 3):
        h.log(step=step, loss=1.0 / step, token_acc=0.3 * step)
    assert repr(h) == "History(3 steps: loss=0.3333, token_acc=0.9)"
    from attnlib import plot_history

    ax = plot_history(h, keys="loss")
    assert ax.get_xlabel() == "step" and list(ax.lines[0].get_xdata()) == [1.0, 2.0, 3.0]
