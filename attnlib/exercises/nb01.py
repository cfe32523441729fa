"""Checkers for notebook 01's exercises (the seq2seq bottleneck: clipping, search errors, parameter counts, one injected error)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem


def _number(value, what: str, kind=float):
    """``(kind(value), None)``, or ``(None, a sentence saying what was expected)`` when ``value`` is not a number."""
    try:
        return kind(value), None
    except (TypeError, ValueError):
        return None, f"{what}, got {type(value).__name__}"


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


def _coefficients(vocab_size: int, emb: int) -> tuple[int, int, int]:
    """(a, b, c) with parameters = a H^2 + b H + c for Seq2Seq(Encoder(V, E, H), Decoder(V, E, H))."""
    # per LSTM: 4 gate blocks of H x (E + H) weights and two biases (b_ih, b_hh) of 4H; output layer H x V + V
    return 2 * 4, 2 * (4 * emb + 2 * 4) + vocab_size, 2 * vocab_size * emb + vocab_size


@checker("1.3")
def parameter_formula(answer, vocab_size: int, emb: int, ratio=None) -> tuple[bool, str]:
    """``answer``: the coefficients (a, b, c) of the parameter count a H^2 + b H + c of
    Seq2Seq(Encoder(V, E, H), Decoder(V, E, H)); ``ratio``: the count at H=256 over the count at H=128."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        return False, "give the three coefficients as a tuple (a, b, c): the count is a * H**2 + b * H + c"
    try:
        a, b, c = (float(x) for x in answer)
    except (TypeError, ValueError):
        return False, "the coefficients should be numbers"
    if not all(math.isfinite(x) for x in (a, b, c)):
        return False, "the coefficients should be finite numbers"
    # a fit (np.polyfit) or a float sum gives 845.0000000001 for 845: read a value that close to a whole number as it
    if any(abs(x - round(x)) > 1e-6 * max(1.0, abs(x)) for x in (a, b, c)):
        return False, "each coefficient counts weights, so it is a whole number; give a, b and c as whole numbers"
    a, b, c = (float(round(x)) for x in (a, b, c))
    A, B, C = _coefficients(vocab_size, emb)
    if (a, b, c) != (A, B, C):
        if (a, b, c) == (A, B - 2 * 4, C):
            return False, "a and c are right, but b is not: look again at the bias vectors of each LSTM"
        if (a, b, c) == (A, B, C - 2 * vocab_size * emb):
            return False, "the constant c misses the two embedding tables (vocab_size x emb each)"
        if (a, b, c) == (A, B - vocab_size, C - vocab_size):
            return False, "you forgot the decoder's output layer (hidden -> vocab_size, with bias)"
        if a == A / 2:
            return False, "the H^2 coefficient a is too small: how many LSTMs does the model have?"
        if a != A:
            return False, "the H^2 coefficient a is not right: count the hidden-to-hidden weights of the LSTMs"
        if b != B:
            return False, "a is right, but the H coefficient b is not: list every layer whose size grows with H once"
        return False, "a and b are right, but the constant c is not: which layers do not depend on H?"
    if ratio is None:
        return False, "the coefficients are right; now compute ratio_256_128 with them (the placeholder is still None)"
    ratio, problem = _number(ratio, "ratio_256_128 should be a number")
    require(problem)
    right = (A * 256**2 + B * 256 + C) / (A * 128**2 + B * 128 + C)
    if abs(ratio - right) < 5e-3:
        return True, "the coefficients are right, and the ratio follows from them"
    if abs(ratio - 1 / right) < 5e-3:
        return False, "that ratio is upside down: parameters at H=256 divided by parameters at H=128"
    if abs(ratio - 4.0) < 1e-9 or abs(ratio - 2.0) < 1e-9:
        return False, "that is the ratio of the H^2 (or H) terms alone; compute it from the whole formula"
    return False, "the coefficients are right, but the ratio is not what they give for 256 against 128"


def _sequence_logprob(model, src, src_key_padding_mask, out) -> torch.Tensor:
    """(B,): the total log-probability ``model`` gives to each row of ``out`` (B, T) as its output, up to and including
    ``<eos>``; ``<pad>`` after it does not count."""
    logp = torch.log_softmax(model(src, out, src_key_padding_mask).double(), -1).gather(-1, out[..., None])[..., 0]
    return (logp * (out != model.pad_id)).sum(1)


def search_error_shares(model, data) -> dict[str, float]:
    """Among the test sequences greedy decoding gets wrong, the share whose gold target the model finds more likely
    (a higher total log p) than greedy's output: ``"right"``. Two usual slips: ``"all"`` (divided by every test
    sequence) and ``"reverse"`` (greedy's output at least as likely); ``"n_wrong"``: how many greedy gets wrong.
    The shares are NaN when greedy decoding gets every sequence right."""
    from attnlib.decoding import greedy_decode

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    src, real, tgt = data.src.to(device), data.src_key_padding_mask.to(device), data.tgt.to(device)
    T = tgt.shape[1]
    with torch.no_grad():
        out = greedy_decode(model, src, real, max_len=T)
        out = torch.nn.functional.pad(out, (0, T - out.shape[1]), value=model.pad_id)  # (N, T)
        wrong = (out != tgt).any(1)  # (N,)
        lp_greedy, lp_gold = _sequence_logprob(model, src, real, out), _sequence_logprob(model, src, real, tgt)
    model.train(was_training)
    if not wrong.any():
        return {"right": float("nan"), "all": float("nan"), "reverse": float("nan"), "n_wrong": 0}
    return {"right": float((lp_gold > lp_greedy)[wrong].double().mean()),
            "all": float(((lp_gold > lp_greedy) & wrong).double().mean()),
            "reverse": float((lp_greedy >= lp_gold)[wrong].double().mean()), "n_wrong": int(wrong.sum())}


@checker("1.2")
def search_error_share(answer, model, data) -> tuple[bool, str]:
    """``answer``: among the sequences of ``data`` that greedy decoding gets wrong, the share whose gold target has a
    higher total log-probability under ``model`` than greedy's own output (a search error, not a model error)."""
    got, problem = _number(answer, "expected a number (a share of the wrong sequences)")
    require(problem)
    shares = search_error_shares(model, data)
    truth = shares["right"]
    if truth != truth:  # nan: no wrong sequence to look at
        return False, "greedy decoding gets every test sequence right with this model: nothing to measure"
    if abs(got - truth) < 1e-6:
        return True, (f"{truth:.3f} of the {shares['n_wrong']} sequences greedy gets wrong are search errors: "
                      "the model prefers the right answer, greedy decoding did not find it")
    if got > 1 and abs(got - round(got)) < 1e-9:
        return False, "that looks like a count; the exercise asks for a share of the sequences greedy gets wrong"
    if not 0.0 <= got <= 1.0:
        return False, f"a share lies between 0 and 1, got {got}"
    close = lambda key: abs(got - shares[key]) < 1e-6  # noqa: E731
    if close("all"):
        return False, "you divided by every test sequence; keep only those greedy decoding gets wrong"
    if close("reverse"):
        return False, "that is the share where greedy's output is at least as likely (model errors); the exercise asks for the other side"
    return False, f"{got:.4f} is not the share of search errors among the sequences greedy decoding gets wrong"


def _fed_a_wrong_digit(model, data, position: int, offset: int = 1, only_right: bool = True):
    """Among the test sequences greedy decoding gets entirely right (``only_right``), feed the gold target with
    digit ``position`` replaced by (d + offset) mod 10 -> (the teacher-forced predictions, their gold targets),
    each (n, T), and the (n, T) bool of which target positions hold a digit. None when no sequence is kept."""
    from attnlib.decoding import greedy_decode

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    src, real, tgt = data.src.to(device), data.src_key_padding_mask.to(device), data.tgt
    T = tgt.shape[1]
    zero = data.tgt_vocab.stoi["0"]
    with torch.no_grad():
        out = greedy_decode(model, src, real, max_len=T).cpu()
        out = torch.nn.functional.pad(out, (0, T - out.shape[1]), value=-1)
        keep = (out == tgt).all(1) if only_right else torch.ones(len(tgt), dtype=torch.bool)
        fed = tgt[keep].clone()
        fed[:, position] = zero + (fed[:, position] - zero + offset) % 10
        pred = model(src[keep], fed.to(device), real[keep]).argmax(-1).cpu()
    model.train(was_training)
    if not keep.any():
        return None
    gold = tgt[keep]
    return pred, gold, (gold >= zero) & (gold <= zero + 9)


def injected_error_rate(model, data, position: int, offset: int = 1, read: int | None = None,
                        only_right: bool = True) -> float:
    """Among the test sequences greedy decoding gets entirely right (``only_right``), feed the gold target with
    digit ``position`` replaced by (d + offset) mod 10: the share of them whose digit ``read`` (default
    position + 1) comes out wrong."""
    fed = _fed_a_wrong_digit(model, data, position, offset, only_right)
    if fed is None:
        return float("nan")
    pred, gold, _ = fed
    read = position + 1 if read is None else read
    return float((pred[:, read] != gold[:, read]).float().mean())


def later_damage_rate(model, data, position: int, offset: int = 1, first: int | None = None,
                      only_right: bool = True) -> float:
    """Like :func:`injected_error_rate`, but the share of sequences with at least one wrong digit from position
    ``first`` (default position + 2: after the next digit) to the last digit (``<eos>`` not counted)."""
    fed = _fed_a_wrong_digit(model, data, position, offset, only_right)
    if fed is None:
        return float("nan")
    pred, gold, digit = fed
    first = position + 2 if first is None else first
    scored = digit.clone()
    scored[:, :first] = False
    return float(((pred != gold) & scored).any(1).float().mean())


@checker("1.4")
def injected_error(answer, model, data, position: int = 4) -> tuple[bool, str]:
    """``answer``: among the sequences greedy decoding gets right, the share with at least one wrong digit after
    digit position+1 (from position+2 to the last digit) when the decoder is fed the gold target with digit
    ``position`` replaced by (d + 1) mod 10 (a float)."""
    got, problem = _number(answer, "expected a number (a share of sequences)")
    require(problem)
    if not 0.0 <= got <= 1.0:
        return False, f"a share lies between 0 and 1, got {got}"
    truth = later_damage_rate(model, data, position)
    if truth != truth:  # nan: no sequence to measure on
        return False, "greedy decoding gets no test sequence entirely right with this model: nothing to measure"
    if abs(got - truth) < 1e-6:
        return True, (f"{truth:.3f} of the right sequences have a wrong digit after digit {position + 1}, "
                      f"although every input after digit {position} is gold")
    close = lambda x: abs(got - x) < 1e-6  # noqa: E731
    if close(later_damage_rate(model, data, position, first=position + 1)):
        return False, (f"you included digit {position + 1}, the first one to read the changed input; the exercise "
                       f"asks about the digits after it, from {position + 2} on")
    if close(injected_error_rate(model, data, position, read=position + 2)):
        return False, f"you read digit {position + 2} alone; count a sequence if ANY digit from {position + 2} on is wrong"
    if close(later_damage_rate(model, data, position, only_right=False)):
        return False, "you used every test sequence; the exercise keeps only those greedy decoding gets entirely right"
    if close(1 - truth):
        return False, "that is the share with every later digit right; the exercise asks for the share with some wrong"
    if close(later_damage_rate(model, data, position, offset=0)):
        return False, "nothing was changed: replace digit d by (d + 1) mod 10 in the decoder's input"
    return False, f"{got:.4f} is not the share of right sequences with a wrong digit after digit {position + 1}"
