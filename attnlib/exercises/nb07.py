"""Checkers for notebook 07's exercises (parameter count, an exhaustive family of inputs, post-norm by hand)."""
from __future__ import annotations

import torch

from . import checker
from .nb00 import callable_problem, tensor_problem


@checker("7.1")
def block_params_fn(answer) -> tuple[bool, str]:
    """``answer(d_model, num_heads, d_ff) -> int``: the parameters of attnlib.TransformerBlock."""
    from attnlib.transformer import TransformerBlock

    problem = callable_problem(answer, "a function block_params(d_model, num_heads, d_ff)")
    if problem:
        return False, problem
    for d, h, d_ff in ((64, 4, 128), (48, 6, 200), (768, 12, 3072)):
        counted = sum(p.numel() for p in TransformerBlock(d, h, d_ff).parameters())
        got = answer(d, h, d_ff)
        if got == counted:
            continue
        if got == counted - 4 * d:
            return False, ("short by 4·d_model: count both the biases of the four attention projections "
                           "and the gamma and beta of the two LayerNorms")
        if got == counted - 8 * d:
            return False, "short by 8·d_model: the attention biases and the two LayerNorms (gamma, beta) are missing"
        if got == counted - (d_ff + d):
            return False, "the feed-forward layers have biases (d_ff and d_model)"
        if got - counted == (h - 1) * 4 * (d * d + d):
            return False, "the heads share the four d_model x d_model projections; the count does not grow with num_heads"
        return False, f"d_model={d}, heads={h}, d_ff={d_ff}: your formula gives {got:,}, numel counts {counted:,}"
    return True, "4(d²+d) + 2·d·d_ff + d_ff + d + 4d, the same for any number of heads"


@checker("7.2")
def one_odd_digit_family(answer, length: int = 12) -> tuple[bool, str]:
    """All inputs of ``length`` digits made of length-1 copies of one digit and a single different digit."""
    n = 10 * 9 * length
    problem = tensor_problem(answer, what="the inputs")
    if problem:
        return False, problem
    if answer.dim() != 2 or answer.shape[1] != length:
        return False, f"expected one input per row, shape (N, {length}), got {tuple(answer.shape)}"
    if answer.shape[0] == 10 * 10 * length:
        return False, "the single digit must differ from the others (a != b); rows of one repeated digit are not in the family"
    if answer.shape[0] != n:
        return False, f"expected 10 · 9 · {length} = {n} inputs (repeated digit, different digit, its position), got {answer.shape[0]}"
    if answer.dtype not in (torch.int64, torch.int32):
        return False, f"expected integer digits (torch.long), got {answer.dtype}"
    counts = torch.nn.functional.one_hot(answer.long().clamp(0, 9), 10).sum(1)  # (N, 10)
    if answer.min() < 0 or answer.max() > 9 or not ((counts == length - 1).sum(1) == 1).all():
        return False, f"every row must hold {length - 1} copies of one digit and one different digit"
    if len({tuple(r) for r in answer.tolist()}) != n:
        return False, "some inputs appear twice (and so others are missing): loop over the position of the odd digit too"
    return True, f"all {n} inputs, each once"


@checker("7.3")
def post_norm_by_hand(answer) -> tuple[bool, str]:
    """``answer(block, x) -> (B, L, d)``: a post-norm TransformerBlock's output from its submodules."""
    from attnlib.transformer import TransformerBlock

    problem = callable_problem(answer, "a function post_norm_forward(block, x)")
    if problem:
        return False, problem
    torch.manual_seed(0)
    block = TransformerBlock(16, 2, 32, dropout=0.0, norm_first=False).eval()
    with torch.no_grad():
        for p in block.parameters():  # LayerNorms start as identity maps; perturb them so mistakes show
            p.add_(0.1 * torch.randn_like(p))
        x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
        right = block(x)
        got = answer(block, x)
        problem = tensor_problem(got, (2, 5, 16), what="the output")
        if problem:
            return False, problem
        block.norm_first = True
        pre = block(x)
        block.norm_first = False
        a = block.attn(x, x, x)[0]
        no_residual = block.norm2(block.ff(block.norm1(a)))
    if torch.allclose(got, right, atol=1e-5):
        return True, "x = norm1(x + attn(x)); x = norm2(x + ff(x))"
    if torch.allclose(got, pre, atol=1e-5):
        return False, "that is pre-norm (normalise, sublayer, add); post-norm adds first and normalises the sum"
    if torch.allclose(got, no_residual, atol=1e-5):
        return False, "the residual connections are missing: add the sublayer's input to its output before the norm"
    return False, "the output differs from block(x): x = norm1(x + attn(x, x, x)[0]), then x = norm2(x + ff(x))"
