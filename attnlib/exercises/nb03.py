"""Checkers for notebook 03's exercises (Luong scores, entropy of attention, top-k weights)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


@checker("3.1")
def entropy_fn(answer) -> tuple[bool, str]:
    """``answer(p (..., L)) -> float``: the mean entropy in nats of the rows of p; zero weights count 0."""
    require(callable_problem(answer, "a function entropy(p)"))
    uniform = torch.full((2, 3, 8), 1 / 8)
    padded = torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])  # masked keys have weight exactly 0
    got_uniform = float(answer(uniform))
    if abs(got_uniform - math.log2(8)) < 1e-4:
        return False, "you used log base 2 (bits); use the natural log, so the answer is in nats"
    if abs(got_uniform + math.log(8)) < 1e-4:
        return False, "the sign is flipped: entropy is -sum(p log p), which is >= 0"
    if abs(got_uniform - 6 * math.log(8)) < 1e-4 or abs(got_uniform - 3 * math.log(8)) < 1e-4:
        return False, "you summed over the rows; take the mean entropy per row"
    if abs(got_uniform - math.log(8)) > 1e-4:
        return False, f"a uniform row over 8 keys has entropy ln 8 = {math.log(8):.3f}, your function gives {got_uniform:.3f}"
    got_padded = float(answer(padded))
    if math.isnan(got_padded):
        return False, "0 * log 0 gave NaN: masked keys have weight 0; clamp p before the log (or drop zeros)"
    if abs(got_padded - math.log(2) / 2) > 1e-4:
        return False, f"rows [0.5, 0.5, 0, 0] and [1, 0, 0, 0] have mean entropy {math.log(2) / 2:.4f}, your function gives {got_padded:.4f}"
    return True, "mean entropy per row in nats, and zero weights contribute nothing"


@checker("3.2")
def score_parameter_formulas(answer) -> tuple[bool, str]:
    """``answer``: dict "general", "concat", "bahdanau" -> function (Dq, Dk, A) -> parameter count."""
    from attnlib.rnn_attention import AdditiveAttention, LuongAttention

    names = {"general", "concat", "bahdanau"}
    if not isinstance(answer, dict) or set(answer) != names:
        got = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
        return False, f"expected a dict with the keys {sorted(names)}, got {got}"
    for dq, dk, a in ((64, 64, 64), (32, 96, 16), (128, 256, 50)):
        modules = {"general": LuongAttention(dq, dk, "general"), "concat": LuongAttention(dq, dk, "concat", attn_dim=a),
                   "bahdanau": AdditiveAttention(dq, dk, attn_dim=a)}
        for name, module in modules.items():
            counted, got = sum(p.numel() for p in module.parameters()), answer[name](dq, dk, a)
            if got == counted:
                continue
            if name == "bahdanau" and got == counted - a:
                return False, "bahdanau: one vector of A is missing; W_h has a bias in attnlib"
            if name == "general" and got == dk * dq + dk:
                return False, "general: W is a plain matrix, Dq x Dk, with no bias"
            if got == counted - a:
                return False, f"{name}: one vector of size A is missing; do not forget v"
            hint = "" if dq != dk else " (a formula that swaps Dq and Dk still passes when they are equal)"
            return False, f"{name} with Dq={dq}, Dk={dk}, A={a}: your formula gives {got:,}, numel counts {counted:,}{hint}"
    return True, "all three formulas match numel, also with Dq != Dk"


@checker("3.3")
def keep_top_k(answer) -> tuple[bool, str]:
    """``answer(w (B, L), k) -> (B, L)``: keep the k largest weights of each row, zero the rest, renormalise."""
    require(callable_problem(answer, "a function keep_top_k(w, k)"))
    w = torch.tensor([[0.1, 0.5, 0.3, 0.1, 0.0], [0.05, 0.05, 0.1, 0.2, 0.6]])
    right = torch.tensor([[0.0, 0.625, 0.375, 0.0, 0.0], [0.0, 0.0, 0.0, 0.25, 0.75]])
    before = w.clone()
    got = answer(w, 2)
    if not torch.equal(w, before):
        return False, "your function changed the weights in place; return a new tensor"
    require(tensor_problem(got, (2, 5), what="the result"))
    got = got.detach().float()
    if torch.allclose(got, torch.tensor([[0.0, 0.5, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.2, 0.6]]), atol=1e-6):
        return False, "the kept weights no longer sum to 1: divide each row by its sum"
    if ((got > 0) != (right > 0)).any():
        return False, "you kept the wrong entries: keep the k largest weights of each row (topk on the last axis)"
    if not torch.allclose(got, right, atol=1e-6):
        return False, f"for k=2 the rows should become {right.tolist()}, got {got.tolist()}"
    if not torch.allclose(answer(w, 1), (w == w.max(-1, keepdim=True).values).float(), atol=1e-6):
        return False, "with k=1 the result should be one-hot on the largest weight"
    return True, "the k largest weights, renormalised to sum to 1"
