"""Notebook 01's checkers reject the usual mistakes and accept every right answer, without showing the answer."""
from __future__ import annotations

import pytest
import torch

from attnlib import Decoder, Encoder, Seq2Seq, make_reversal, seed_everything
from attnlib.exercises import check
from attnlib.training import evaluate, train_seq2seq


def right_clip(grads, max_norm):
    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    factor = min(1.0, max_norm / float(total))
    return [g * factor for g in grads]


def test_11_accepts_with_or_without_torchs_epsilon():
    assert check("1.1", right_clip, quiet=True)

    def with_eps(grads, max_norm):
        total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        factor = (max_norm / (total + 1e-6)).clamp(max=1.0)
        return [g * factor for g in grads]

    assert check("1.1", with_eps, quiet=True)


def always_rescale(grads, max_norm):
    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    return [g * max_norm / total for g in grads]


@pytest.mark.parametrize("wrong, says", [
    (lambda grads, m: [g.clamp(-m, m) for g in grads], "clip_grad_value_"),
    (lambda grads, m: [g * min(1.0, m / float(g.norm())) for g in grads], "on its own norm"),
    (always_rescale, "nothing should change"),
    (lambda grads, m: [g / 2 for g in grads], "rescaled to the threshold"),
    (lambda grads, m: grads[0], "one tensor per gradient"),
])
def test_11_rejects(wrong, says):
    verdict = check("1.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


V, E = 23, 16


def right_count(H):
    lstm = 4 * H * (E + H) + 2 * 4 * H
    return 2 * V * E + 2 * lstm + H * V + V


@pytest.mark.parametrize("wrong, says", [
    (lambda H: right_count(H) - 8 * H, "two, b_ih and b_hh"),
    (lambda H: right_count(H) - 2 * V * E, "embedding"),
    (lambda H: right_count(H) - H * V - V, "output layer"),
    (lambda H: right_count(H) - 4 * H * (E + H) - 8 * H, "one each"),
    (lambda H: 4 * H * H, "not the model's count"),
])
def test_13_params_rejects(wrong, says):
    verdict = check("1.3", wrong, quiet=True, vocab_size=V, emb=E, ratio=1.0)
    assert verdict.ok is False and says in verdict.message
    assert str(right_count(8)) not in verdict.message and f"{right_count(8):,}" not in verdict.message  # no answer shown


def test_13_ratio():
    right = right_count(256) / right_count(128)
    assert check("1.3", right_count, quiet=True, vocab_size=V, emb=E, ratio=right)
    for wrong, says in ((None, "ratio_256_128"), (1 / right, "upside down"), (4.0, "H^2"), (right + 0.2, "not what it gives")):
        verdict = check("1.3", right_count, quiet=True, vocab_size=V, emb=E, ratio=wrong)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


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
        verdict = check("1.2", wrong, quiet=True, model=model, data=data, differ=0)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


def test_12_beam_accepts_and_checks_the_count(small_model):
    model, data = small_model
    right = {k: evaluate(model, data, beam_size=k)["seq_acc"] for k in (1, 3, 10)}
    assert check("1.2", right, quiet=True, model=model, data=data, differ=0)
    for wrong, says in ((None, "count the inputs"), (3, "count of inputs"), ("many", "an int")):
        verdict = check("1.2", right, quiet=True, model=model, data=data, differ=wrong)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)
