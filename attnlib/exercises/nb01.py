"""Checkers for notebook 01's exercises (the seq2seq bottleneck: clipping, beam search, parameter counts, exposure bias)."""
from __future__ import annotations

import torch

from . import checker, require
from .nb00 import callable_problem


def _gradients(scale: float, seed: int = 0) -> list[torch.Tensor]:
    """Three gradient tensors of different shapes, with a total norm of about ``scale``."""
    g = torch.Generator().manual_seed(seed)
    grads = [torch.randn(4, 3, generator=g), torch.randn(5, generator=g), torch.randn(2, 2, 2, generator=g)]
    total = torch.linalg.vector_norm(torch.stack([x.norm() for x in grads]))
    return [x * scale / total for x in grads]


def _torch_clip(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    params = [torch.zeros_like(x, requires_grad=True) for x in grads]
    for p, x in zip(params, grads):
        p.grad = x.clone()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params]


@checker("1.1")
def clip_by_total_norm(answer) -> tuple[bool, str]:
    """``answer(grads: list of tensors, max_norm) -> list of tensors``: what ``clip_grad_norm_`` does to the gradients.

    When the norm of all the gradients together exceeds ``max_norm``, every gradient is multiplied by the
    same factor, so that the total norm becomes ``max_norm``; otherwise nothing changes. PyTorch adds
    1e-6 to the norm in the factor: answers with or without it are accepted (they differ by ~1e-7).
    """
    require(callable_problem(answer, "a function my_clip(grads, max_norm)"))
    for scale, max_norm in ((5.0, 1.0), (0.3, 1.0), (2.0, 0.5)):
        grads = _gradients(scale)
        copies = [x.clone() for x in grads]
        got = answer(copies, max_norm)
        if not isinstance(got, (list, tuple)) or len(got) != len(grads):
            return False, f"return a list with one tensor per gradient ({len(grads)} here), got {type(got).__name__}"
        for i, (x, y) in enumerate(zip(got, grads)):
            if not isinstance(x, torch.Tensor) or x.shape != y.shape:
                return False, f"gradient {i}: expected a tensor of shape {tuple(y.shape)}, got {getattr(x, 'shape', type(x).__name__)}"
        want = _torch_clip(grads, max_norm)
        if all(torch.allclose(x, w, rtol=1e-5, atol=1e-7) for x, w in zip(got, want)):
            continue
        total = float(torch.linalg.vector_norm(torch.stack([x.norm() for x in got])))
        if scale < max_norm:
            return False, (f"with gradients of total norm {scale} and max_norm {max_norm} nothing should change: "
                           "clipping only acts above the threshold")
        if all(torch.equal(x, y.clamp(-max_norm, max_norm)) for x, y in zip(got, grads)):
            return False, "you clamped each value (that is clip_grad_value_); clipping by norm rescales whole gradients"
        if all(abs(float(x.norm()) - min(max_norm, float(y.norm()))) < 1e-5 for x, y in zip(got, grads)) and abs(total - max_norm) > 1e-4:
            return False, "you clipped each tensor on its own norm; the norm is that of all gradients together, with one factor for all"
        if abs(total - max_norm) < 1e-4:
            return False, "the total norm is right but the direction changed: multiply every gradient by the same factor"
        return False, (f"gradients of total norm {scale} with max_norm {max_norm}: yours come out with total norm "
                       f"{total:.4f}; they should be rescaled to the threshold")
    return True, "rescaled by one factor when the total norm is above the threshold, untouched below it"


@checker("1.3")
def parameter_formula(answer, vocab_size: int, emb: int, ratio=None) -> tuple[bool, str]:
    """``answer(H) -> int``: parameters of Seq2Seq(Encoder(V, E, H), Decoder(V, E, H)); ``ratio``: answer(256) / answer(128)."""
    from attnlib.seq2seq import Decoder, Encoder, Seq2Seq

    require(callable_problem(answer, "a function n_params(H)"))
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
        return False, f"H={hidden}: your formula gives {got:,}, which is not the model's count; list its layers and count each"
    if ratio is None:
        return False, "the formula is right; now compute ratio_256_128 with it (the placeholder is still None)"
    try:
        ratio = float(ratio)
    except (TypeError, ValueError):
        return False, f"ratio_256_128 should be a number, got {type(ratio).__name__}"
    right = answer(256) / answer(128)
    if abs(ratio - right) < 5e-3:
        return True, "the formula matches numel for H = 8, 32 and 100, and the ratio follows from it"
    if abs(ratio - 1 / right) < 5e-3:
        return False, "that ratio is upside down: parameters at H=256 divided by parameters at H=128"
    if abs(ratio - 4.0) < 1e-9 or abs(ratio - 2.0) < 1e-9:
        return False, "that is the ratio of the H^2 (or H) terms alone; compute it from the whole formula"
    return False, "the formula is right, but the ratio is not what it gives for 256 against 128"


@checker("1.2")
def beam_sequence_accuracies(answer, model, data, differ=None) -> tuple[bool, str]:
    """``answer``: dict beam size (1, 3, 10) -> free-running whole-sequence accuracy of ``model`` on ``data``;
    ``differ``: on how many inputs of ``data`` beam size 1's output differs from greedy_decode's."""
    from attnlib.decoding import beam_search, greedy_decode
    from attnlib.training import evaluate

    if not isinstance(answer, dict) or set(answer) != {1, 3, 10}:
        got = sorted(answer, key=str) if isinstance(answer, dict) else type(answer).__name__
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
    if differ is None:
        return False, "the accuracies are right; now count the inputs where beam size 1 and greedy_decode disagree (n_differ)"
    device = next(model.parameters()).device
    src, real = data.src.to(device), data.src_key_padding_mask.to(device)
    T = data.tgt.shape[1]
    greedy = greedy_decode(model, src, real, max_len=T)
    beam1, _ = beam_search(model, src, real, beam_size=1, max_len=T)
    width = max(greedy.shape[1], beam1.shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]), value=model.pad_id)  # noqa: E731
    truth = int((pad(greedy) != pad(beam1)).any(1).sum())
    try:
        differ = int(differ)
    except (TypeError, ValueError):
        return False, f"n_differ should be a count (an int), got {type(differ).__name__}"
    if differ != truth:
        return False, "the accuracies are right but the count of inputs where beam 1 and greedy differ is not"
    return True, "the three accuracies and the count of inputs where beam size 1 and greedy decoding disagree are right"


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
