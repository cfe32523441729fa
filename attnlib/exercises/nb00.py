"""Checkers for notebook 00's exercises (a decoder's mask over a padded batch, a block's parameter count, PyTorch's float mask).

``tensor_problem`` is shared by the other notebooks' checkers: it names what is wrong with
an answer that should be a tensor of a given shape (and dtype), or returns None.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from . import checker, require


def tensor_problem(answer: Any, shape: tuple[int, ...] | None = None, dtype: torch.dtype | None = None,
                   what: str = "your answer") -> str | None:
    """A sentence saying why ``answer`` is not a tensor of ``shape`` and ``dtype``, or None if it is."""
    if not isinstance(answer, torch.Tensor):
        return f"expected {what} to be a torch.Tensor, got {type(answer).__name__}"
    if shape is not None and tuple(answer.shape) != tuple(shape):
        return f"expected {what} to have shape {tuple(shape)}, got {tuple(answer.shape)}"
    if dtype is not None and answer.dtype != dtype:
        return f"expected {what} to have dtype {dtype}, got {answer.dtype}"
    return None


def callable_problem(answer: Any, what: str = "a function") -> str | None:
    """A sentence saying that ``answer`` is not callable, or None."""
    if not callable(answer):
        return f"expected {what}, got {type(answer).__name__}: define it with def and pass the function itself"
    return None


def _combined_mask_truth(lengths=(6, 4), L: int = 6) -> torch.Tensor:
    """The (B, 1, L, L) mask of a causal decoder over a padded batch: key j <= query i, and key j is real."""
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    real = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L)
    return causal & real[:, None, None, :]


def _rows_right(mask: torch.Tensor, lengths: list[int], L: int) -> bool:
    """Every real query's row equals the decoder mask's; a padding query's row may be anything (its output is
    thrown away)."""
    B = len(lengths)
    try:
        full = mask.expand(B, 2, L, L)
    except RuntimeError:
        return False
    right = _combined_mask_truth(tuple(lengths), L).expand(B, 2, L, L)
    padding_query = (torch.arange(L)[None, :] >= torch.tensor(lengths)[:, None])[:, None, :]  # (B, 1, Lq)
    return bool(((full == right).all(-1) | padding_query).all())


_HELPERS = {"causal_mask", "padding_mask"}


@checker("0.1")
def decoder_mask_function(answer) -> tuple[bool, str]:
    """A function ``decoder_mask(lengths, L)`` that builds, from ``torch.arange`` and comparisons, the bool mask
    (B, 1, L, L) of a causal self-attention over sequences of ``lengths`` padded to ``L``.

    The mask for lengths (6, 4) and L = 6 goes through :func:`_mask_feedback` (a sentence per mistake); then the
    function must be right for other batches too. The rows of padding queries are not judged: their outputs
    are thrown away, so any row there is as right as another (all False, the decoder mask's row, itself only).
    """
    require(callable_problem(answer, "a function decoder_mask(lengths, L)"))
    used = _HELPERS & set(getattr(getattr(answer, "__code__", None), "co_names", ()))
    if used:
        return False, (f"your function calls {', '.join(sorted(used))}: build both conditions yourself from "
                       "torch.arange and comparisons (that is what those helpers do inside)")
    ok, message = _mask_feedback(answer([6, 4], 6))
    if not ok:
        return False, message
    for lengths, L in [([3, 1, 2], 3), ([5], 7), ([2, 8, 8, 1], 8)]:
        mask = answer(list(lengths), L)
        require(tensor_problem(mask, what=f"decoder_mask({lengths}, {L})"))
        if mask.dtype != torch.bool or mask.dim() != 4 or not _rows_right(mask, lengths, L):
            return False, (f"right for lengths [6, 4] and L = 6, wrong for lengths {lengths} and L = {L}: "
                           "build the mask from the arguments, not from numbers of the first example")
    return True, "right for every batch tried; for lengths [6, 4], " + message


def _mask_feedback(answer) -> tuple[bool, str]:
    """The mask of a causal self-attention over 2 sequences of 6 and 4 tokens padded to 6, with a sentence per mistake.

    It must broadcast to (B=2, heads, 6, 6): a real query sees itself and earlier keys, never a padding
    key. The rows of the two padding queries of sequence 2 are not judged.
    """
    require(tensor_problem(answer, what="the mask"))
    if answer.dtype != torch.bool:
        return False, f"expected a bool mask (True = may attend), got dtype {answer.dtype}"
    if answer.dim() != 4:
        return False, (f"the mask has shape {tuple(answer.shape)}; MultiHeadAttention takes a 2-D (Lq, Lk) mask or a "
                       "4-D (B, heads, Lq, Lk) one: give it four axes, with size 1 where it is the same for all")
    try:
        full = answer.expand(2, 2, 6, 6)
    except RuntimeError:
        return False, f"a mask of shape {tuple(answer.shape)} does not broadcast to (B=2, heads=2, Lq=6, Lk=6)"
    right = _combined_mask_truth().expand(2, 2, 6, 6)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    real = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    if torch.equal(full, ~right):
        return False, "the polarity is inverted: True means 'may attend'"
    if torch.equal(full, causal.expand(2, 2, 6, 6)):
        return False, "this is the causal mask alone: sequence 2's queries can still attend to its padding keys"
    if torch.equal(full, real[:, None, None, :].expand(2, 2, 6, 6)):
        return False, "this is the padding mask alone: every query can still see later tokens"
    if torch.equal(full, (causal | real[:, None, None, :]).expand(2, 2, 6, 6)):
        return False, "you joined the two masks with 'or': a key must be allowed by both (earlier AND real)"
    if torch.equal(full, (causal.T & real[:, None, None, :]).expand(2, 2, 6, 6)):
        return False, "the causal part is transposed: row i is query i, and it may see keys 0..i, not i..5"
    if torch.equal(full, _combined_mask_truth((6, 3)).expand(2, 2, 6, 6)) or torch.equal(
            full, _combined_mask_truth((6, 5)).expand(2, 2, 6, 6)):
        return False, "off by one: sequence 2 has 4 real tokens, positions 0 to 3"
    real_query = real[:, None, :, None].expand(2, 2, 6, 6)  # only the real queries' rows are judged
    if not torch.equal(full[real_query], right[real_query]):
        b, h, q, k = ((full != right) & real_query).nonzero()[0].tolist()
        yours, should = ("may", "may not") if full[b, h, q, k] else ("may not", "may")
        return False, f"sequence {b + 1}, query {q}: in your mask it {yours} attend to key {k}, but it {should}"
    from attnlib.multihead import MultiHeadAttention

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 8, generator=gen)
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    with torch.no_grad():
        _, w = mha(x, x, x, mask=answer)
    on_padding = w[1, :, :4, 4:].abs().sum().item()  # the real queries of sequence 2
    on_future = (w * ~causal * real[:, None, :, None]).abs().sum().item()
    if on_padding or on_future:
        return False, f"with your mask some weight still falls on padding ({on_padding:.3f}) or on later keys ({on_future:.3f})"
    return True, "in a 2-head MultiHeadAttention with your mask, no weight falls on a later key or on a padding key"


_COUNTERS = {"TransformerBlock", "parameters", "numel", "named_parameters", "state_dict"}


def _names(code) -> set[str]:
    """The global and attribute names a function's code uses, nested code (comprehensions, lambdas) included."""
    if code is None:
        return set()
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def _block_params(d: int, d_ff: int) -> int:
    return 4 * (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d) + 2 * 2 * d


@checker("0.2")
def block_parameter_formula(answer: Callable) -> tuple[bool, str]:
    """``answer(d_model, num_heads, d_ff) -> int``: the parameters of TransformerBlock(d_model, num_heads, d_ff)."""
    from attnlib.transformer import TransformerBlock

    require(callable_problem(answer, "a function block_params(d_model, num_heads, d_ff)"))
    counting = _COUNTERS & _names(getattr(answer, "__code__", None))
    if counting:
        return False, (f"your function uses {', '.join(sorted(counting))}: that counts a block's parameters, as the "
                       "cell above does; write the count as a formula of d_model and d_ff instead")
    try:
        heads_matter = int(answer(48, 3, 100)) != int(answer(48, 12, 100))
    except (TypeError, ValueError) as err:
        return False, f"block_params(48, 3, 100) did not give a whole number: {err}"
    if heads_matter:
        return False, ("your count changes with the number of heads: the heads share four d_model x d_model "
                       "projections, so the head count does not change the total")
    for d, h, d_ff in ((16, 4, 32), (64, 8, 256), (48, 3, 100)):
        counted = sum(p.numel() for p in TransformerBlock(d, h, d_ff, dropout=0.0).parameters())
        try:
            got = int(answer(d, h, d_ff))
        except (TypeError, ValueError) as err:
            return False, f"block_params({d}, {h}, {d_ff}) did not give a whole number: {err}"
        if got == counted:
            continue
        where = f"d_model={d}, num_heads={h}, d_ff={d_ff}"
        if got == counted - 4 * d:
            return False, f"{where}: the two LayerNorms are missing (each has a weight and a bias of d_model)"
        if got == counted - 2 * d:
            return False, f"{where}: you counted one LayerNorm; the block has two, one after attention and one after the feed-forward network"
        if got in (4 * d * d + 2 * d * d_ff, 4 * d * d + 2 * d * d_ff + 2 * d, 4 * d * d + 2 * d * d_ff + 4 * d):
            return False, f"{where}: the biases are missing; every nn.Linear and LayerNorm here has one"
        if got == counted - d * d - d:
            return False, f"{where}: three attention matrices counted; the output projection W_o is a fourth"
        if got == counted - (d_ff * d + d) or got == counted - (d * d_ff + d_ff):
            return False, f"{where}: the feed-forward network has two layers, d_model -> d_ff and d_ff -> d_model"
        return False, f"{where}: your formula gives {got:,}, which is not the block's count; list its layers and count each"
    return True, "the formula matches the block's numel for three sizes; the number of heads does not enter it"


@checker("0.3")
def additive_mask(answer: Callable) -> tuple[bool, str]:
    """``answer(mask) -> float mask``: 0 where attnlib's bool mask allows, -inf (or a very negative number) where it blocks.

    The float form is added to the scores by ``nn.MultiheadAttention``. The verdict comes from the result: a blocked
    key must get exactly zero weight in ``nn.MultiheadAttention`` and the output must equal attnlib's with the bool
    mask, so a large finite negative number (-1e3 works here) is accepted as well as -inf.
    """
    require(callable_problem(answer, "a function to_additive_mask(mask)"))
    from attnlib.multihead import MultiHeadAttention

    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    scattered = torch.rand(7, 7, generator=torch.Generator().manual_seed(2)) < 0.5  # (7, 7), not causal
    scattered |= torch.eye(7, dtype=torch.bool)  # every query may attend to at least itself
    for mask in (causal, scattered):
        L = mask.shape[0]
        before = mask.clone()
        got = answer(mask)
        if not torch.equal(mask, before):
            return False, "your function changed its input mask in place; return a new tensor"
        require(tensor_problem(got, (L, L), what=f"the returned mask for a ({L}, {L}) input"))
        if got.dtype == torch.bool:
            return False, "that is a bool mask; the exercise asks for the float form, whose values are added to the scores"
        if not got.is_floating_point():
            return False, f"return a float tensor (it is added to the scores), got {got.dtype}"
        if got.dtype != torch.float32:
            return False, f"return float32, the dtype of the scores it is added to; got {got.dtype}, which PyTorch refuses to mix"
        allowed, blocked = got[mask], got[~mask]
        if torch.equal(got, mask.float()):
            return False, "mask.float() adds 1 to the allowed scores and 0 to the blocked ones: nothing is blocked"
        if bool((allowed < -1e3).all()) and bool((blocked == 0).all()):
            return False, "the polarity is inverted: the allowed positions must get 0, the blocked ones -inf"
        if not bool((allowed == 0).all()):
            what = "" if mask is causal else " (for a mask that is not causal: the answer must follow its input)"
            return False, "an allowed position must get 0, so that its score is unchanged" + what
        with torch.random.fork_rng(devices=[]):  # building the modules draws from the global generator: not the learner's
            ref = nn.MultiheadAttention(16, 2, batch_first=True).eval()
            ours = MultiHeadAttention(16, 2).copy_from_torch(ref).eval()
        x = torch.randn(1, L, 16, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            theirs, weights = ref(x, x, x, attn_mask=answer(mask), average_attn_weights=False)  # (1, heads, L, L)
            mine, _ = ours(x, x, x, mask=mask)
        leak = weights[..., ~mask].max().item() if (~mask).any() else 0.0
        if leak > 0:
            return False, (f"with your float mask a blocked key still gets weight (up to {leak:.2g}): a blocked position "
                           "needs -inf, or a number so negative that exp() of it is 0")
        if not torch.allclose(theirs, mine, atol=1e-5):
            return False, "nn.MultiheadAttention with your float mask does not give the output of attnlib's module with the bool mask"
    return True, "nn.MultiheadAttention with your float mask gives the same output as attnlib's module with the bool mask"
