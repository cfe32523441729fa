"""Checkers for notebook 03's exercises (entropy of attention, concat as an additive module, top-k weights)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


@checker("3.1")
def entropy_fn(answer) -> tuple[bool, str]:
    """``answer(p (..., L)) -> float``: the mean entropy in nats of the rows of p; zero weights count 0.

    Accepted within 1e-3, so that a small epsilon inside the log (``log(p + 1e-4)``) passes; the messages
    name the mistake without printing the expected values."""
    require(callable_problem(answer, "a function entropy(p)"))
    uniform = torch.full((2, 3, 8), 1 / 8)
    padded = torch.tensor([[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])  # masked keys have weight exactly 0
    tol, ln8 = 1e-3, math.log(8)
    for p in (uniform, padded):  # one number, not one value per row (the usual slip with (..., L))
        got = answer(p)
        if isinstance(got, torch.Tensor) and got.numel() != 1:
            return False, ("your function returned a tensor of shape "
                           f"{tuple(got.shape)}: return one number, the mean entropy over all rows, not one value per row")
    got_uniform = float(answer(uniform))
    if abs(got_uniform - math.log2(8)) < tol:
        return False, "you used log base 2 (bits); use the natural log, so the answer is in nats"
    if abs(got_uniform + ln8) < tol:
        return False, "the sign is flipped: entropy is -sum(p log p), which is >= 0"
    if abs(got_uniform - 6 * ln8) < tol or abs(got_uniform - 3 * ln8) < tol:
        return False, "you summed over the rows; take the mean entropy per row"
    if ln8 - 0.2 < got_uniform < ln8 - tol:
        return False, (f"for uniform rows over 8 keys your function gives {got_uniform:.5f}, a little less than ln 8: "
                       "if you added an epsilon inside the log (log(p + eps)), it lowers the entropy; clamp p before "
                       "the log instead (p.clamp_min(1e-12)), or make the epsilon much smaller")
    if abs(got_uniform - ln8) > tol:
        return False, (f"for uniform rows over 8 keys your function gives {got_uniform:.5f}, which is not ln 8: "
                       "take -sum(p log p) over the last axis, then the mean over all the rows")
    got_padded = float(answer(padded))
    if math.isnan(got_padded):
        return False, "0 * log 0 gave NaN: masked keys have weight 0; clamp p before the log (or drop zeros)"
    if abs(got_padded - math.log(2) / 2) > tol:
        return False, (f"right for uniform rows, but for the rows [0.5, 0.5, 0, 0] and [1, 0, 0, 0] your function "
                       f"gives {got_padded:.5f}, which is not their mean entropy: a weight of 0 must add exactly 0 "
                       "(use p as it is: no softmax, no renormalising), and each row counts once in the mean")
    return True, "mean entropy per row in nats, and zero weights contribute nothing"


@checker("3.2")
def concat_as_additive(answer) -> tuple[bool, str]:
    """``answer(luong) -> AdditiveAttention``: the additive module whose scores equal a concat LuongAttention's."""
    from attnlib.rnn_attention import AdditiveAttention, LuongAttention

    require(callable_problem(answer, "a function concat_to_additive(luong)"))
    for dq, dk, a in ((6, 6, 5), (4, 7, 3)):  # equal sizes first (a swap of the two blocks runs there), then Dq != Dk
        torch.manual_seed(dq * 10 + dk)
        luong = LuongAttention(dq, dk, method="concat", attn_dim=a)
        before = {name: t.detach().clone() for name, t in luong.state_dict().items()}
        got = answer(luong)
        if any(not torch.equal(t, before[name]) for name, t in luong.state_dict().items()):
            return False, "your function changed the Luong module; copy its weights into a new module instead"
        if not isinstance(got, AdditiveAttention):
            return False, f"return an attnlib AdditiveAttention (got {type(got).__name__})"
        if (got.query_dim, got.key_dim, got.v.in_features) != (dq, dk, a):
            return False, (f"sizes: the Luong module has Dq={dq}, Dk={dk}, A={a}; yours has "
                           f"Dq={got.query_dim}, Dk={got.key_dim}, A={got.v.in_features}")
        s, h = torch.randn(3, dq), torch.randn(3, 5, dk)
        real = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
        with torch.no_grad():
            want_ctx, want_w = luong(s, h, real)
            got_ctx, got_w = got(s, h, real)
            if torch.allclose(got_w, want_w, atol=1e-5) and torch.allclose(got_ctx, want_ctx, atol=1e-5):
                continue
            if got.W_h.bias is not None and got.W_h.bias.abs().max() > 0:
                return False, "W_h still has its (random) bias: Luong's concat score has no bias, so set it to 0"
            if not torch.allclose(got.v.weight, luong.v.weight):
                return False, "the weights differ: copy v as well, not only W"
            if dq == dk and torch.allclose(got.W_s.weight, luong.W.weight[:, dq:]):
                return False, "the two blocks of W are swapped: W [s; h] puts s first, so its first Dq columns act on s"
        return False, f"with Dq={dq}, Dk={dk}, A={a} your module's attention weights differ from the Luong module's"
    return True, "an additive module with W_h's bias at 0 scores exactly like Luong's concat, also with Dq != Dk"


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
        return False, ("for k=2 you kept the right entries, but their values are off: divide each kept weight by the "
                       "sum of the kept weights of its row, so that the kept weights keep their ratios and sum to 1")
    if not torch.allclose(answer(w, 1), (w == w.max(-1, keepdim=True).values).float(), atol=1e-6):
        return False, "with k=1 the result should be one-hot on the largest weight"
    return True, "the k largest weights, renormalised to sum to 1"
