"""Checkers for notebook 01's exercises (the seq2seq bottleneck)."""
from __future__ import annotations

import torch

from . import checker
from .nb00 import callable_problem


def _cases(pad: int = 0):
    """Predictions and targets with padding: (pred, target, true sequence accuracy, true token accuracy)."""
    target = torch.tensor([[5, 6, 7, 2], [5, 6, 2, pad], [8, 2, pad, pad], [9, 9, 9, 2]])
    pred = torch.tensor([[5, 6, 7, 2],      # right
                         [5, 6, 2, 4],      # right: the last position is padding
                         [8, 3, pad, pad],  # wrong at position 1
                         [9, 9, 9, 2]])     # right
    return pred, target, 0.75, 12 / 13


@checker("1.1")
def sequence_accuracy_fn(answer) -> tuple[bool, str]:
    """``answer(pred (B, T), target (B, T), pad_id) -> float``: exact match over the non-pad target tokens."""
    problem = callable_problem(answer, "a function seq_accuracy(pred, target, pad_id)")
    if problem:
        return False, problem
    pred, target, seq, tok = _cases()
    got = float(answer(pred.clone(), target.clone(), 0))
    if abs(got - tok) < 1e-6:
        return False, "that is token accuracy; a sequence counts only if every one of its real tokens is right"
    if abs(got - 0.5) < 1e-6:
        return False, "padding counts as wrong here: ignore the positions where the target is <pad>"
    if abs(got - 0.25) < 1e-6:
        return False, "you counted wrong sequences; accuracy is the share of sequences that are completely right"
    if abs(got - seq) > 1e-6:
        return False, f"on a small test batch your function gives {got:.3f}, the right value is {seq:.3f}"
    pred2, target2 = pred.clone(), target.clone()
    target2[target2 == 0], pred2[pred2 == 0] = 7, 7  # another pad id: 7 is now padding
    target2[0, 2] = 3
    if abs(float(answer(pred2, target2, 7)) - 0.5) > 1e-6:
        return False, "use the pad_id argument rather than assuming padding is 0"
    return True, "a sequence counts when all its real tokens are right; padding is ignored"


@checker("1.3")
def parameter_formula(answer, vocab_size: int, emb: int) -> tuple[bool, str]:
    """``answer(H) -> int``: parameters of Seq2Seq(Encoder(V, E, H), Decoder(V, E, H))."""
    from attnlib.seq2seq import Decoder, Encoder, Seq2Seq

    problem = callable_problem(answer, "a function n_params(H)")
    if problem:
        return False, problem
    for hidden in (8, 32, 100):
        model = Seq2Seq(Encoder(vocab_size, emb, hidden), Decoder(vocab_size, emb, hidden))
        counted = sum(p.numel() for p in model.parameters())
        got = answer(hidden)
        if got == counted:
            continue
        lstm = 4 * hidden * (emb + hidden) + 2 * 4 * hidden
        if got == counted - 2 * 4 * hidden:
            return False, f"H={hidden}: you are short by one bias per LSTM: PyTorch's LSTM has two, b_ih and b_hh"
        if got == counted - 2 * vocab_size * emb:
            return False, f"H={hidden}: you forgot the two embedding tables (vocab_size x emb each)"
        if got == counted - (hidden * vocab_size + vocab_size):
            return False, f"H={hidden}: you forgot the decoder's output layer (hidden -> vocab_size, with bias)"
        if got == counted - lstm:
            return False, f"H={hidden}: you counted one LSTM; the encoder and the decoder have one each"
        return False, f"H={hidden}: your formula gives {got:,}, the model has {counted:,}"
    return True, "the formula matches numel for H = 8, 32 and 100; the H^2 terms of the LSTMs dominate"


@checker("1.2")
def beam_sequence_accuracies(answer, model, data) -> tuple[bool, str]:
    """``answer``: dict beam size (1, 3, 10) -> free-running whole-sequence accuracy of ``model`` on ``data``."""
    from attnlib.training import evaluate

    if not isinstance(answer, dict) or set(answer) != {1, 3, 10}:
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        return False, f"expected a dict with the beam sizes 1, 3 and 10 as keys, got {got}"
    scores = {k: evaluate(model, data, beam_size=k) for k in (1, 3, 10)}
    for k in (1, 3, 10):
        try:
            got = float(answer[k])
        except (TypeError, ValueError):
            return False, f"beam {k}: expected a number, got {type(answer[k]).__name__}"
        if abs(got - scores[k]["seq_acc"]) < 1e-9:
            continue
        if abs(got - scores[k]["token_acc"]) < 1e-9:
            return False, f"beam {k}: that is the token accuracy; the exercise asks for whole-sequence accuracy (seq_acc)"
        return False, f"beam {k}: {got:.4f} is not the sequence accuracy of this model on this test set"
    return True, "" + ", ".join(f"beam {k}: {scores[k]['seq_acc']:.3f}" for k in (1, 3, 10))


def teacher_forced_accuracy(model, data) -> float:
    """Token accuracy when the decoder is fed the gold previous token at every step (padding ignored)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(data.src.to(device), data.tgt.to(device), data.src_key_padding_mask.to(device))
    model.train(was_training)
    pred, target = logits.argmax(-1).cpu(), data.tgt
    real = target != data.tgt_vocab.pad_id
    return float(((pred == target) & real).sum() / real.sum())


@checker("1.4")
def teacher_forced_token_accuracy(answer, model, data) -> tuple[bool, str]:
    """``answer``: the test token accuracy of ``model`` with teacher forcing (a float)."""
    from attnlib.training import evaluate

    try:
        got = float(answer)
    except (TypeError, ValueError):
        return False, f"expected a number (the accuracy), got {type(answer).__name__}"
    truth = teacher_forced_accuracy(model, data)
    if abs(got - truth) < 1e-4:
        free = evaluate(model, data)["token_acc"]
        return True, f"{truth:.3f} with teacher forcing against {free:.3f} free-running"
    if abs(got - evaluate(model, data)["token_acc"]) < 1e-4:
        return False, "that is the free-running (greedy) accuracy; feed the gold tokens with model(src, tgt, src_key_padding_mask)"
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model.eval()(data.src.to(device), data.tgt.to(device), data.src_key_padding_mask.to(device))
    shifted = (logits.argmax(-1).cpu()[:, :-1] == data.tgt[:, 1:]).float().mean().item()
    if abs(got - shifted) < 1e-4:
        return False, "off by one: logits[:, t] already predicts tgt[:, t] (the decoder starts from <bos>)"
    if got > 1.0 or got < 0.0:
        return False, f"an accuracy lies between 0 and 1, got {got}"
    return False, f"{got:.4f} is not the teacher-forced token accuracy; compare logits.argmax(-1) with tgt on the real tokens"
