"""Checkers for notebook 09's exercises (all-MiniLM-L6-v2: the sink, a previous-token head, attention rollout)."""
from __future__ import annotations

import torch

from . import checker, require
from .nb00 import callable_problem, tensor_problem


@checker("9.1")
def share_without_sink(answer, rows: torch.Tensor, target: int) -> tuple[bool, str]:
    """``answer`` (layers, heads): the weight of ``rows`` (layers, heads, L) on ``target`` once the first and
    last token ([CLS], [SEP]) are dropped and each row is renormalised to sum to 1."""
    layers, heads, L = rows.shape
    require(tensor_problem(answer, (layers, heads), what="the shares"))
    kept = rows.clone()
    kept[..., [0, L - 1]] = 0
    right = (kept / kept.sum(-1, keepdim=True))[..., target]
    got = answer.detach().to(right.dtype)
    if torch.allclose(got, rows[..., target], atol=1e-5) or torch.allclose(got, kept[..., target], atol=1e-5):
        return False, "the rows are not renormalised: after dropping [CLS] and [SEP], divide each row by its new sum"
    no_sep = rows.clone()
    no_sep[..., 0] = 0
    if torch.allclose(got, (no_sep / no_sep.sum(-1, keepdim=True))[..., target], atol=1e-5):
        return False, "you dropped [CLS] only; [SEP] (the last token) is a sink too"
    other_axis = kept[..., target] / kept.sum(-2, keepdim=True)[..., target]
    if torch.allclose(got, other_axis, atol=1e-5):
        return False, "renormalise over the keys (the last axis), not over the heads"
    if not torch.allclose(got, right, atol=1e-5):
        return False, "the shares differ: zero columns 0 and L-1, divide by the row sum, then take the target column"
    best = int(right.flatten().argmax())
    return True, f"without the sink the largest share is {right.flatten()[best]:.2f}, in L{best // heads}H{best % heads}"


@checker("9.2")
def previous_token_weight(answer, att: torch.Tensor) -> tuple[bool, str]:
    """``answer`` (layers, heads): the mean weight each head puts on the previous token, from ``att`` (layers, heads, L, L)."""
    layers, heads, L, _ = att.shape
    require(tensor_problem(answer, (layers, heads), what="the mean weight on the previous token"))
    got = answer.detach().to(att.dtype)
    right = torch.diagonal(att, offset=-1, dim1=-2, dim2=-1).mean(-1)
    if torch.allclose(got, torch.diagonal(att, offset=1, dim1=-2, dim2=-1).mean(-1), atol=1e-5):
        return False, "that is the next token: row i is the query, so the previous token is column i - 1 (offset=-1)"
    if torch.allclose(got, torch.diagonal(att, dim1=-2, dim2=-1).mean(-1), atol=1e-5):
        return False, "that is the main diagonal (each token on itself); the previous token is one below it"
    if torch.allclose(got, torch.diagonal(att, offset=-1, dim1=-2, dim2=-1).sum(-1), atol=1e-5):
        return False, "that is the sum along the diagonal; take the mean"
    if torch.allclose(got, torch.diagonal(att, offset=-1, dim1=-2, dim2=-1).sum(-1) / L, atol=1e-5):
        return False, "you divided by L; only L - 1 tokens have a previous token, so average over those L - 1 entries"
    if not torch.allclose(got, right, atol=1e-5):
        return False, "the values differ: take the diagonal just below the main one (entries [i, i-1]) and average it"
    best = int(right.flatten().argmax())
    return True, f"L{best // heads}H{best % heads} puts {right.flatten()[best]:.2f} on the previous token on average"


def _rollout(att: torch.Tensor, reduce=lambda a: a.mean(dim=0), residual: bool = True,
             later_on_left: bool = True) -> torch.Tensor:
    """The rollout of ``att`` (layers, heads, L, L) and the variants learners write by mistake."""
    L = att.shape[-1]
    eye = torch.eye(L, dtype=att.dtype)
    result = eye
    for layer in att:
        mixed = 0.5 * reduce(layer) + 0.5 * eye if residual else reduce(layer)  # (L, L)
        result = mixed @ result if later_on_left else result @ mixed
    return result


@checker("9.3")
def attention_rollout(answer) -> tuple[bool, str]:
    """``answer(att (layers, heads, L, L)) -> (L, L)``: the product over layers, last layer on the left, of
    0.5 * (the layer's map averaged over heads) + 0.5 * I (Abnar & Zuidema, 2020)."""
    require(callable_problem(answer, "a function rollout(att)"))
    g = torch.Generator().manual_seed(0)
    # (layers, heads, L, L): peaked, unlike uniform maps; a second input of another size catches hard-coded sizes
    att, other = ((3 * torch.randn(shape, generator=g)).softmax(-1) for shape in ((4, 3, 6, 6), (6, 2, 5, 5)))
    try:
        got, got_other = answer(att.clone()), answer(other.clone())
    except Exception as err:  # a hard-coded number of layers or tokens fails on one of the two inputs
        return False, (f"your function raised {type(err).__name__} ({err}); it must work for any att of shape "
                       "(layers, heads, L, L): take the sizes from att.shape")
    for result, size in ((got, 6), (got_other, 5)):
        require(tensor_problem(result, (size, size), what="the rollout"))
    got = got.detach().to(att.dtype)
    right = _rollout(att)  # rows sum to 1 already: each mixed map is row-stochastic
    if torch.allclose(got, right, atol=1e-5) and torch.allclose(got_other.detach().to(other.dtype), _rollout(other), atol=1e-5):
        return True, "every layer's map chained with its residual: row i says which input tokens token i draws on"
    mistakes = [
        (_rollout(att, later_on_left=False), "the order is reversed: a later layer reads the result of the earlier "
                                             "ones, so its map multiplies from the left (mixed @ result)"),
        (_rollout(att, residual=False), "the residual is missing: mix each layer's map with the identity, "
                                        "0.5 * map + 0.5 * I, before chaining"),
        (_rollout(att, reduce=lambda a: a.amax(dim=0)), "take the mean over the heads, not the maximum"),
        (_rollout(att, reduce=lambda a: a.amax(dim=0) / a.amax(dim=0).sum(-1, keepdim=True)),
         "take the mean over the heads, not the maximum"),
        (0.5 * att[-1].mean(0) + 0.5 * torch.eye(6), "that is the last layer alone: chain every layer, from the first"),
        (att.mean(1).sum(0), "the layers are added; chain them with matrix products"),
    ]
    for wrong, message in mistakes:
        if torch.allclose(got, wrong, atol=1e-5):
            return False, message
    return False, ("the rollout differs: start from the identity and, layer by layer, multiply "
                   "(0.5 * the heads' mean map + 0.5 * I) from the left")
