"""Notebook 01's checkers reject the usual mistakes and accept the right answers."""
from __future__ import annotations

import pytest
import torch

from attnlib import Decoder, Encoder, Seq2Seq, make_reversal, seed_everything
from attnlib.exercises import check
from attnlib.training import evaluate, train_seq2seq


def right_seq_acc(pred, target, pad_id):
    return ((pred == target) | (target == pad_id)).all(1).float().mean().item()


@pytest.mark.parametrize("wrong, says", [
    (lambda p, t, pad: ((p == t) & (t != pad)).sum().item() / (t != pad).sum().item(), "token accuracy"),
    (lambda p, t, pad: (p == t).all(1).float().mean().item(), "padding"),
    (lambda p, t, pad: 1 - right_seq_acc(p, t, pad), "wrong sequences"),
    (lambda p, t, pad: ((p == t) | (t == 0)).all(1).float().mean().item(), "pad_id"),
])
def test_11_rejects(wrong, says):
    verdict = check("1.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_accepts():
    assert check("1.1", right_seq_acc, quiet=True)


V, E = 23, 16


def right_count(H):
    lstm = 4 * H * (E + H) + 2 * 4 * H
    return 2 * V * E + 2 * lstm + H * V + V


@pytest.mark.parametrize("wrong, says", [
    (lambda H: right_count(H) - 8 * H, "two, b_ih and b_hh"),
    (lambda H: right_count(H) - 2 * V * E, "embedding"),
    (lambda H: right_count(H) - H * V - V, "output layer"),
    (lambda H: right_count(H) - 4 * H * (E + H) - 8 * H, "one each"),
    (lambda H: 4 * H * H, "your formula gives"),
])
def test_13_params_rejects(wrong, says):
    verdict = check("1.3", wrong, quiet=True, vocab_size=V, emb=E)
    assert verdict.ok is False and says in verdict.message


def test_13_params_accepts():
    assert check("1.3", right_count, quiet=True, vocab_size=V, emb=E)


@pytest.fixture(scope="module")
def small_model():
    train, data = make_reversal(460, 5, seed=0).split(400)
    seed_everything(0)
    model = Seq2Seq(Encoder(len(data.src_vocab), 8, 32), Decoder(len(data.tgt_vocab), 8, 32))
    train_seq2seq(model, train, epochs=3, lr=1e-2, seed=0, progress=False)  # half-trained: the three numbers differ
    return model.eval(), data


def teacher_forced(model, data, shift=False):
    with torch.no_grad():
        logits = model(data.src, data.tgt, data.src_key_padding_mask)
    pred = logits.argmax(-1)
    if shift:
        return (pred[:, :-1] == data.tgt[:, 1:]).float().mean().item()
    real = data.tgt != data.tgt_vocab.pad_id
    return ((pred == data.tgt) & real).sum().item() / real.sum().item()


def test_14_rejects_free_running_and_off_by_one(small_model):
    model, data = small_model
    free = evaluate(model, data)["token_acc"]
    shifted = teacher_forced(model, data, shift=True)
    assert abs(free - teacher_forced(model, data)) > 1e-3 and abs(shifted - teacher_forced(model, data)) > 1e-3
    for wrong, says in ((free, "free-running"), (shifted, "off by one"), ("0.9", "not the teacher-forced"),
                        (12.0, "between 0 and 1")):
        verdict = check("1.4", wrong, quiet=True, model=model, data=data)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


def test_14_accepts(small_model):
    model, data = small_model
    assert check("1.4", teacher_forced(model, data), quiet=True, model=model, data=data)


def test_12_beam_rejects_token_accuracy_and_missing_sizes(small_model):
    model, data = small_model
    scores = {k: evaluate(model, data, beam_size=k) for k in (1, 3, 10)}
    right = {k: v["seq_acc"] for k, v in scores.items()}
    tokens = {k: v["token_acc"] for k, v in scores.items()}
    assert all(abs(right[k] - tokens[k]) > 1e-3 for k in right)
    for wrong, says in ((tokens, "token accuracy"), ({1: right[1], 3: right[3]}, "beam sizes 1, 3 and 10"),
                        ({1: right[10], 3: right[3], 10: right[1]} if right[1] != right[10] else {**right, 1: 2.0},
                         "beam 1")):
        verdict = check("1.2", wrong, quiet=True, model=model, data=data)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


def test_12_beam_accepts(small_model):
    model, data = small_model
    right = {k: evaluate(model, data, beam_size=k)["seq_acc"] for k in (1, 3, 10)}
    assert check("1.2", right, quiet=True, model=model, data=data)
