"""Notebook 01's checkers reject the usual mistakes and accept every right answer, without showing the answer."""
from __future__ import annotations

import pytest
import torch

from attnlib import Decoder, Encoder, Seq2Seq, greedy_decode, make_reversal, seed_everything
from attnlib.exercises import check, nb01
from attnlib.training import train_seq2seq


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
    ((8, 8 * E + 8 + V, 2 * V * E + V), "bias vectors"),
    ((8, 8 * E + 16 + V, V), "embedding"),
    ((8, 8 * E + 16, 2 * V * E), "output layer"),
    ((4, 4 * E + 8 + V, 2 * V * E + V), "how many LSTMs"),
    ((8, 8 * E + V, 2 * V * E + V), "b is not"),
    ((8, 8 * E + 16 + V, 0), "constant c is not"),
    (right_count, "tuple (a, b, c)"),  # a copy of the numel count is not the answer
    ((8, 8 * E + 16 + V), "tuple (a, b, c)"),
])
def test_13_rejects(wrong, says):
    verdict = check("1.3", wrong, quiet=True, vocab_size=V, emb=E, ratio=1.0)
    assert verdict.ok is False and says in verdict.message, verdict.message
    assert not any(str(x) in verdict.message for x in RIGHT[1:])  # no answer shown


def test_13_accepts_a_fit_that_is_whole_up_to_rounding():
    np = pytest.importorskip("numpy")
    sizes = [16, 32, 64, 128]
    fitted = np.polyfit(sizes, [right_count(H) for H in sizes], 2)  # floats like 845.0000000000003
    right = right_count(256) / right_count(128)
    assert check("1.3", tuple(fitted), quiet=True, vocab_size=V, emb=E, ratio=right)
    assert check("1.3", [x + 1e-9 for x in RIGHT], quiet=True, vocab_size=V, emb=E, ratio=right)


@pytest.mark.parametrize("wrong, says", [
    ((8.5, 8 * E + 16 + V, 2 * V * E + V), "whole numbers"),
    ((8, 8 * E + 16 + V + 0.25, 2 * V * E + V), "whole numbers"),
    ((8, float("nan"), 2 * V * E + V), "finite"),
    ((4 + 1e-10, 4 * E + 8 + V, 2 * V * E + V), "how many LSTMs"),  # near-whole wrong values keep their diagnosis
    ((8.0, 8 * E + 16 + V - 1e-10, V), "embedding"),
])
def test_13_rejects_non_whole_and_keeps_diagnosis_of_near_whole(wrong, says):
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
def good_model():  # gets about 2/3 of its test sequences entirely right: exercises 2 and 4 need both kinds
    train, data = make_reversal(1160, 5, seed=0).split(1000)
    seed_everything(0)
    model = Seq2Seq(Encoder(len(data.src_vocab), 16, 64), Decoder(len(data.tgt_vocab), 16, 64))
    train_seq2seq(model, train, epochs=8, lr=1e-2, seed=0, progress=False)
    return model.eval(), data


def later_wrong(model, data, position=1, first=None, only_right=True, offset=1, with_eos=False):
    """Written independently of the checker: among the right sequences, the share with a wrong digit from position
    ``first`` (default position + 2) on, after digit ``position`` of the decoder's input was changed."""
    T = data.tgt.shape[1]
    with torch.no_grad():
        out = greedy_decode(model, data.src, data.src_key_padding_mask, max_len=T)
        out = torch.nn.functional.pad(out, (0, T - out.shape[1]), value=-1)
        keep = (out == data.tgt).all(1) if only_right else torch.ones(len(data.tgt), dtype=torch.bool)
        fed = data.tgt[keep].clone()
        digit = fed[:, position] - 3  # the digits 0-9 have ids 3-12
        fed[:, position] = 3 + (digit + offset) % 10
        pred = model(data.src[keep], fed, data.src_key_padding_mask[keep]).argmax(-1)
    first = position + 2 if first is None else first
    last = T if with_eos else T - 1  # every target here is its digits, then <eos>
    return (pred[:, first:last] != data.tgt[keep][:, first:last]).any(1).float().mean().item()


def test_14_accepts(good_model):
    model, data = good_model
    assert check("1.4", later_wrong(model, data), quiet=True, model=model, data=data, position=1)
    assert check("1.4", later_wrong(model, data, position=0), quiet=True, model=model, data=data, position=0)


def test_14_rejects(good_model):
    model, data = good_model
    right = later_wrong(model, data)
    wrongs = [(later_wrong(model, data, first=2), "you included digit 2"),
              (nb01.injected_error_rate(model, data, 1, read=3), "digit 3 alone"),
              (later_wrong(model, data, only_right=False), "every test sequence"), (1 - right, "every later digit right"),
              (later_wrong(model, data, offset=0), "nothing was changed"),
              ("a lot", "expected a number"), (12.0, "between 0 and 1")]
    for wrong, says in wrongs:
        if isinstance(wrong, float) and 0 <= wrong <= 1:
            assert abs(wrong - right) > 1e-6, says  # the fixture tells the mistake from the answer
        verdict = check("1.4", wrong, quiet=True, model=model, data=data, position=1)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)
        assert f"{right:.3f}" not in verdict.message  # no answer shown


@torch.no_grad()
def logprob(model, data, out):
    """Written independently of the checker: the total log p of each row of ``out`` as the model's output."""
    logits = model(data.src, out, data.src_key_padding_mask)
    logp = logits.double().log_softmax(-1).gather(-1, out[..., None])[..., 0]
    return (logp * (out != 0)).sum(1)  # <pad> (id 0) after <eos> does not count


def search_errors(model, data, over_all=False, reverse=False, count=False):
    """Among the sequences greedy decoding gets wrong, the share whose target the model finds more likely."""
    T = data.tgt.shape[1]
    out = greedy_decode(model, data.src, data.src_key_padding_mask, max_len=T)
    out = torch.nn.functional.pad(out, (0, T - out.shape[1]))  # <pad> (id 0) after <eos>
    wrong = (out != data.tgt).any(1)
    lp_out, lp_gold = logprob(model, data, out), logprob(model, data, data.tgt)
    hits = ((lp_out >= lp_gold if reverse else lp_gold > lp_out) & wrong).sum().item()
    return hits if count else hits / (len(wrong) if over_all else wrong.sum().item())


def test_12_accepts(good_model):
    model, data = good_model
    right = search_errors(model, data)
    assert 0 < right < 1  # the fixture has search errors and model errors
    assert check("1.2", right, quiet=True, model=model, data=data)
    assert check("1.2", torch.tensor(right), quiet=True, model=model, data=data)


def test_12_rejects(good_model):
    model, data = good_model
    right = search_errors(model, data)
    wrongs = [(search_errors(model, data, over_all=True), "every test sequence"),
              (search_errors(model, data, reverse=True), "other side"),
              (search_errors(model, data, count=True), "looks like a count"),
              (right + 0.05, "is not the share"), ("many", "expected a number"), (-0.5, "between 0 and 1")]
    for wrong, says in wrongs:
        if isinstance(wrong, float) and 0 <= wrong <= 1:
            assert abs(wrong - right) > 1e-6, says  # the fixture tells the mistake from the answer
        verdict = check("1.2", wrong, quiet=True, model=model, data=data)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)
        assert f"{right:.3f}" not in verdict.message  # no answer shown
