"""Notebook 01's checkers reject the usual mistakes and accept every right answer, without showing the answer."""
from __future__ import annotations

import pytest
import torch

from attnlib import Decoder, Encoder, Seq2Seq, beam_search, greedy_decode, make_reversal, seed_everything
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


RIGHT = (8, 8 * E + 16 + V, 2 * V * E + V)


def test_13_coefficients_match_the_model():  # the checker's truth is the count of a real model
    for H in (8, 32, 100):
        model = Seq2Seq(Encoder(V, E, H), Decoder(V, E, H))
        assert sum(p.numel() for p in model.parameters()) == right_count(H) == RIGHT[0] * H * H + RIGHT[1] * H + RIGHT[2]


@pytest.mark.parametrize("wrong, says", [
    ((8, 8 * E + 8 + V, 2 * V * E + V), "two, b_ih and b_hh"),
    ((8, 8 * E + 16 + V, V), "embedding"),
    ((8, 8 * E + 16, 2 * V * E), "output layer"),
    ((4, 4 * E + 8 + V, 2 * V * E + V), "one LSTM each"),
    ((8, 8 * E + V, 2 * V * E + V), "b is not"),
    ((8, 8 * E + 16 + V, 0), "constant c is not"),
    (right_count, "tuple (a, b, c)"),  # a copy of the numel count is not the answer
    ((8, 8 * E + 16 + V), "tuple (a, b, c)"),
])
def test_13_rejects(wrong, says):
    verdict = check("1.3", wrong, quiet=True, vocab_size=V, emb=E, ratio=1.0)
    assert verdict.ok is False and says in verdict.message, verdict.message
    assert not any(str(x) in verdict.message for x in RIGHT[1:])  # no answer shown


def test_13_ratio():
    right = right_count(256) / right_count(128)
    assert check("1.3", RIGHT, quiet=True, vocab_size=V, emb=E, ratio=right)
    assert check("1.3", [float(x) for x in RIGHT], quiet=True, vocab_size=V, emb=E, ratio=round(right, 3))
    for wrong, says in ((None, "ratio_256_128"), (1 / right, "upside down"), (4.0, "H^2"), (right + 0.2, "not what they give")):
        verdict = check("1.3", RIGHT, quiet=True, vocab_size=V, emb=E, ratio=wrong)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


@pytest.fixture(scope="module")
def small_model():
    train, data = make_reversal(460, 5, seed=0).split(400)
    seed_everything(0)
    model = Seq2Seq(Encoder(len(data.src_vocab), 8, 32), Decoder(len(data.tgt_vocab), 8, 32))
    train_seq2seq(model, train, epochs=3, lr=1e-2, seed=0, progress=False)  # half-trained: the three numbers differ
    return model.eval(), data


@pytest.fixture(scope="module")
def good_model():  # gets about 2/3 of its test sequences entirely right: exercise 4 needs some
    train, data = make_reversal(1160, 5, seed=0).split(1000)
    seed_everything(0)
    model = Seq2Seq(Encoder(len(data.src_vocab), 16, 64), Decoder(len(data.tgt_vocab), 16, 64))
    train_seq2seq(model, train, epochs=8, lr=1e-2, seed=0, progress=False)
    return model.eval(), data


def injected(model, data, position=2, read=None, only_right=True, offset=1):
    """Written independently of the checker: the share of right sequences whose next digit goes wrong."""
    T = data.tgt.shape[1]
    with torch.no_grad():
        out = greedy_decode(model, data.src, data.src_key_padding_mask, max_len=T)
        out = torch.nn.functional.pad(out, (0, T - out.shape[1]), value=-1)
        keep = (out == data.tgt).all(1) if only_right else torch.ones(len(data.tgt), dtype=torch.bool)
        fed = data.tgt[keep].clone()
        digit = fed[:, position] - 3  # the digits 0-9 have ids 3-12
        fed[:, position] = 3 + (digit + offset) % 10
        pred = model(data.src[keep], fed, data.src_key_padding_mask[keep]).argmax(-1)
    read = position + 1 if read is None else read
    return (pred[:, read] != data.tgt[keep][:, read]).float().mean().item()


def test_14_accepts(good_model):
    model, data = good_model
    assert check("1.4", injected(model, data), quiet=True, model=model, data=data, position=2)
    assert check("1.4", injected(model, data, position=1), quiet=True, model=model, data=data, position=1)


def test_14_rejects(good_model):
    model, data = good_model
    right = injected(model, data)
    wrongs = [(injected(model, data, read=2), "you read digit 2"), (injected(model, data, read=4), "one digit too far"),
              (injected(model, data, only_right=False), "every test sequence"), (1 - right, "comes out right"),
              ("a lot", "expected a number"), (12.0, "between 0 and 1")]
    for wrong, says in wrongs:
        if isinstance(wrong, float) and 0 <= wrong <= 1:
            assert abs(wrong - right) > 1e-6, says  # the fixture tells the mistake from the answer
        verdict = check("1.4", wrong, quiet=True, model=model, data=data, position=2)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)
        assert f"{right:.3f}" not in verdict.message  # no answer shown


def n_disagree(model, data, k, length_penalty=1.0):
    T = data.tgt.shape[1]
    greedy = greedy_decode(model, data.src, data.src_key_padding_mask, max_len=T)
    beam, _ = beam_search(model, data.src, data.src_key_padding_mask, beam_size=k, max_len=T, length_penalty=length_penalty)
    width = max(greedy.shape[1], beam.shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]))  # noqa: E731
    return int((pad(greedy) != pad(beam)).any(1).sum())


def test_12_beam_rejects_token_accuracy_and_missing_sizes(small_model):
    model, data = small_model
    scores = {k: evaluate(model, data, beam_size=k) for k in (1, 3, 10)}
    right = {k: v["seq_acc"] for k, v in scores.items()}
    tokens = {k: v["token_acc"] for k, v in scores.items()}
    assert all(abs(right[k] - tokens[k]) > 1e-3 for k in right)
    for wrong, says in ((tokens, "token accuracy"), ({1: right[1], 3: right[3]}, "beam sizes 1, 3 and 10"),
                        ({1: right[10], 3: right[3], 10: right[1]} if right[1] != right[10] else {**right, 1: 2.0},
                         "beam 1")):
        verdict = check("1.2", wrong, quiet=True, model=model, data=data, differ=n_disagree(model, data, 3))
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


def test_12_beam_accepts_and_checks_the_count(small_model):
    model, data = small_model
    right = {k: evaluate(model, data, beam_size=k)["seq_acc"] for k in (1, 3, 10)}
    n3 = n_disagree(model, data, 3)
    assert n3 > 0 and n_disagree(model, data, 1) == 0 and n_disagree(model, data, 10) != n3  # the fixture tells them apart
    assert check("1.2", right, quiet=True, model=model, data=data, differ=n3)
    assert check("1.2", right, quiet=True, model=model, data=data, differ=n_disagree(model, data, 3, 0.0))
    for wrong, says in ((None, "count the inputs"), (0, "beam size 1"), (n_disagree(model, data, 10), "beam size 10"),
                        (n3 + 1, "count of inputs"), ("many", "an int")):
        verdict = check("1.2", right, quiet=True, model=model, data=data, differ=wrong)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)
