"""Checkers for notebook 08: the guided tasks "which head does X?" (8.1 the answer head, 8.2 the head that changes
least with the digits: every head that one input cannot tell from the best is accepted) and the three exercises at
the end (8.3 an explorer of any input, 8.4 the answer head's hit rate, 8.5 where the invented century digits of a
date look)."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

from . import checker, require


def _choice(answer: Any, scores: torch.Tensor) -> tuple[int, int]:
    """``(layer, head)`` from a pair or from an explorer (its ``.layer`` and ``.head``), checked against ``scores``."""
    if hasattr(answer, "layer") and hasattr(answer, "head"):
        answer = (answer.layer, answer.head)
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and all(isinstance(v, int) for v in answer)):
        raise ValueError(f"expected (layer, head) as two ints, e.g. (0, 2), or the explorer itself; got {answer!r}")
    layer, head = answer
    n_layers, n_heads = scores.shape
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise ValueError(f"layer must be in [0, {n_layers - 1}] and head in [0, {n_heads - 1}], got ({layer}, {head})")
    return layer, head


#: A head counts as a right answer when it is the best head on at least one probe input in this many: the
#: explorer shows one input at a time, and one input cannot tell such heads apart.
ONE_INPUT_IN = 20


def _wins(per_input: torch.Tensor, highest: bool) -> torch.Tensor:
    """``per_input (N, layers, heads)`` -> ``(layers, heads)``: the share of the N inputs on which each head is the best."""
    flat = per_input.flatten(1)                                                     # (N, layers * heads)
    if highest:
        best = flat >= flat.max(1, keepdim=True).values - 1e-6                      # every head tied for the best wins
    else:
        best = flat <= flat.min(1, keepdim=True).values + 1e-6
    return best.float().mean(0).reshape(per_input.shape[1:])


def _probe_scores(W: torch.Tensor, probe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Per input and head: the weight on the answer (Task A) and how far the map moves from the head's mean map
    (Task B), each ``(N, layers, heads)``; and the weight on the answer that even spreading gives."""
    W = W.float()
    holds = (probe.sort(dim=1).values[:, :, None] == probe[:, None, :]).float()   # (N, query, key)
    on_answer = (W * holds[:, None, None]).sum(-1).mean(-1)                      # (N, layers, heads)
    change = 0.5 * (W - W.mean(0)).abs().sum(-1).mean(-1)                        # (N, layers, heads): total variation
    return on_answer, change, holds.mean().item()


@checker("8.1")
def answer_head(answer: Any, *, W: torch.Tensor, probe: torch.Tensor) -> tuple[bool, str]:
    """Task A: a head that puts the most weight on the key(s) holding the digit each position must output.

    ``W (N, layers, heads, L, L)``: the probe maps; ``probe (N, L)``: the probe digits. Every head that is the best
    on at least one input in ``ONE_INPUT_IN`` is accepted."""
    on_answer, _, chance = _probe_scores(W, probe)
    layer, head = _choice(answer, on_answer[0])
    share, mean = _wins(on_answer, highest=True)[layer, head].item(), on_answer.mean(0)[layer, head].item()
    where = (f"layer {layer}, head {head} puts {mean:.3f} of its weight on the answer on average (even spreading: "
             f"{chance:.3f}) and has the most of all heads on {share:.1%} of the {len(W):,} inputs")
    if share >= 1 / ONE_INPUT_IN:
        return True, f"{where}: one input can show it as the answer head"
    if mean < chance * 1.2:
        return False, f"{where}: it reads the answer little more than a head that spreads its weight evenly"
    return False, f"{where}: another head beats it on almost every input; pin a few queries and compare the heads"


@checker("8.2")
def digit_blind_head(answer: Any, *, W: torch.Tensor, probe: torch.Tensor) -> tuple[bool, str]:
    """Task B: a head whose map changes least when the digits change (its maps stay closest to its mean map).

    Every head that changes least on at least one input in ``ONE_INPUT_IN`` is accepted."""
    _, change, _ = _probe_scores(W, probe)
    layer, head = _choice(answer, change[0])
    share, mean = _wins(change, highest=False)[layer, head].item(), change.mean(0)
    where = (f"layer {layer}, head {head} moves {mean[layer, head]:.3f} of its weight away from its mean map on "
             f"average and changes least of all heads on {share:.1%} of the {len(W):,} inputs")
    if share >= 1 / ONE_INPUT_IN:
        return True, f"{where}: one input cannot tell it from the other heads that change least"
    if mean[layer, head] == mean.max():
        return False, f"{where}: that is the head that depends MOST on the digits; Task B asks for the least"
    return False, f"{where}: look for a difference map that stays pale"


# ---------------------------------------------------------------------------------------------
# Exercises 1-3 at the end of the notebook


def _sorter_maps(sorter, digits: list[int]) -> torch.Tensor:
    """The sorter's attention on ``digits``: ``(layers, heads, L, L)``."""
    with torch.no_grad():
        _, maps = sorter(torch.tensor([digits]), return_attention=True)
    return torch.stack([m[0] for m in maps]).float()


@checker("8.3")
def explore_any_input(answer: Any, *, sorter) -> tuple[bool, str]:
    """Exercise 1: a function ``text -> AttentionExplorer`` of the sorter's attention on the digits of ``text``.

    The explorer must hold every layer and head (rows = queries) and label the tokens ``digit@position``.
    """
    from ..viz.widgets import AttentionExplorer, AttentionHeatmap
    from .nb00 import callable_problem

    require(callable_problem(answer, "a function my_explore(text) that returns an AttentionExplorer"))
    texts = ("3141", "000111222999", "918273645009")
    for text in texts:
        digits = [int(c) for c in text]
        out = answer(text)
        if isinstance(out, AttentionHeatmap):
            return False, "an AttentionHeatmap shows one map; return an AttentionExplorer, which shows every layer and head"
        if not isinstance(out, AttentionExplorer):
            return False, f"my_explore({text!r}) should return an AttentionExplorer, got {type(out).__name__}"
        right = _sorter_maps(sorter, digits)                                   # (layers, heads, L, L)
        got = torch.as_tensor(out.weights.copy())
        n_layers, n_heads, L, _ = right.shape
        if tuple(got.shape[:2]) != (n_layers, n_heads):
            return False, (f"my_explore({text!r}) has {got.shape[0]} layer(s) x {got.shape[1]} heads; the sorter has "
                           f"{n_layers} layers x {n_heads} heads: pass the maps of every layer")
        if tuple(got.shape[2:]) != (L, L):
            return False, (f"my_explore({text!r}) shows {got.shape[2]} x {got.shape[3]} maps, but {L} digits give "
                           f"{L} x {L}: run the sorter on the digits of the text itself (not the π digits, no padding)")
        if not torch.allclose(got, right, atol=1e-5):
            if torch.allclose(got, right.transpose(-1, -2), atol=1e-5):
                return False, "the maps are transposed: rows must be queries and columns keys, as the sorter returns them"
            if torch.allclose(got, _sorter_maps(sorter, sorted(digits)), atol=1e-5):
                return False, (f"these are the maps of the sorted digits of {text!r}; feed the sorter the digits in "
                               f"the order of the text")
            layer, head = divmod(int((got - right).abs().amax(dim=(2, 3)).argmax()), n_heads)
            return False, (f"for {text!r}, layer {layer}, head {head} differs from the sorter's attention on those "
                           f"digits by up to {(got - right).abs().max().item():.3f}: run the sorter on the text's "
                           f"digits with return_attention=True and pass its maps unchanged")
        labels = [f"{d}@{i}" for i, d in enumerate(digits)]
        if list(out.query_tokens) != labels:
            first = next(i for i, (a, b) in enumerate(zip(out.query_tokens, labels)) if a != b)
            return False, (f"label the tokens digit@position as above: for {text!r} token {first} should be "
                           f"{labels[first]!r}, yours is {out.query_tokens[first]!r}")
    return True, (f"your explorer holds the sorter's {n_layers} layers x {n_heads} heads for {len(texts)} different "
                  f"inputs, labelled digit@position")


def _top_key_rates(W: torch.Tensor, holds: torch.Tensor) -> torch.Tensor:
    """For every (layer, head): how often the most attended key of a row holds ``holds`` (a (N, L, L) 0/1 table)."""
    top = W.argmax(-1)                                                              # (N, layers, heads, L)
    table = holds[:, None, None].expand(-1, W.shape[1], W.shape[2], -1, -1)       # (N, layers, heads, L, L)
    return table.gather(-1, top[..., None]).squeeze(-1).float().mean(dim=(0, 3))   # (layers, heads)


@checker("8.4")
def answer_head_hit_rate(answer: Any, *, W: torch.Tensor, probe: torch.Tensor) -> tuple[bool, str]:
    """Exercise 2: the share of (input, query) rows whose most attended key, in the Task A head, holds the answer.

    ``W`` is ``(N, layers, heads, L, L)``, the probe maps; ``probe`` is ``(N, L)``, the probe digits.
    """
    if isinstance(answer, torch.Tensor):
        one_number = answer.numel() == 1
    elif isinstance(answer, np.ndarray):
        one_number = answer.size == 1
    else:
        one_number = isinstance(answer, numbers.Real) and not isinstance(answer, bool)
    if not one_number:
        return False, f"expected one number, the share between 0 and 1, got {type(answer).__name__}"
    got = float(answer)
    W = W.float()
    holds = (probe.sort(dim=1).values[:, :, None] == probe[:, None, :]).float()    # (N, query, key)
    answer_weight = (W * holds[:, None, None]).sum(-1).mean(dim=(0, 3))           # (layers, heads): Task A
    n_heads = W.shape[2]
    layer, head = divmod(int(answer_weight.argmax()), n_heads)
    rates = _top_key_rates(W, holds)
    right = rates[layer, head].item()
    task_a = f"the Task A head (layer {layer}, head {head})"

    def near(x: float) -> bool:
        return abs(got - x) < 1e-5

    if near(right):
        chance = holds.mean().item()
        return True, (f"in {task_a} the top key holds the answer in {right:.3f} of the rows, against {chance:.3f} "
                      f"for a key picked at random")
    if got > 1 and abs(got / 100 - right) < 1e-5:
        return False, "that is a percentage; give the share between 0 and 1"
    if got > 1:
        return False, f"{got:g} is not a share between 0 and 1 (a count? divide by the number of rows)"
    for (l, h) in ((l, h) for l in range(rates.shape[0]) for h in range(n_heads)):
        if (l, h) != (layer, head) and near(rates[l, h].item()):
            return False, (f"that is the rate of layer {l}, head {h}; {task_a} is the one with the highest average "
                           f"weight on the answer (best_a)")
    if near(answer_weight[layer, head].item()):
        return False, (f"that is Task A's average weight on the answer in {task_a}; count instead how often the "
                       f"single most attended key (the argmax over keys) holds the answer")
    if near(holds.mean().item()):
        return False, "that is the chance level (a key picked at random); look at the key the head attends to most"
    if near(rates.mean().item()):
        return False, f"that averages over every head; use only {task_a}"
    own = (probe[:, :, None] == probe[:, None, :]).float()                           # the query's own digit
    if near(_top_key_rates(W, own)[layer, head].item()):
        return False, ("you compared the top key's digit with the query's own digit; position i must output the "
                       "i-th smallest digit (holds_answer compares with the sorted probe)")
    by_query = W.argmax(-2)                                                        # argmax over the queries
    wrong_axis = holds[:, None, None].expand_as(W).gather(-1, by_query[..., None]).squeeze(-1).float().mean(dim=(0, 3))
    if near(wrong_axis[layer, head].item()):
        return False, "you took the argmax over the queries (dim -2); the top key of a row is the argmax over the keys (dim -1)"
    return False, (f"{got:.4f} is not the share for {task_a}: take the argmax over the keys of W[:, {layer}, {head}] "
                   f"and look it up in holds_answer")


def _pair(item: Any, p: int, n_keys: int) -> tuple[int, float] | str:
    """``(position, weight)`` from one item of the answer, or a sentence saying what is wrong with it."""
    import operator

    if not (isinstance(item, (tuple, list)) and len(item) == 2):
        return f"item {p} should be a pair (input position, weight), got {item!r}"
    j, w = item
    if isinstance(j, str):
        return f"give the input position of the character (an int from 0 to {n_keys - 1}), not the character {j!r}"
    try:
        j = operator.index(j)
    except TypeError:
        if isinstance(w, int) or (isinstance(w, torch.Tensor) and not w.is_floating_point()):
            return "each pair is (input position, weight), in that order; yours looks swapped"
        return f"the input position must be an int from 0 to {n_keys - 1}, got {j!r}"
    try:
        w = float(w)
    except (TypeError, ValueError):
        return f"the weight must be a number between 0 and 1, got {type(w).__name__}"
    return j, w


@checker("8.5")
def invented_digits(answer: Any, *, dater, src_vocab, text: str) -> tuple[bool, str]:
    """Exercise 3: for the first two output digits of ``text``, ``[(input position, weight), (input position, weight)]``
    of the input character each reads most (its largest attention weight)."""
    from ..decoding import greedy_decode

    src = torch.tensor([src_vocab.encode(text)])
    with torch.no_grad():
        _, w = greedy_decode(dater, src, return_attention=True)                    # (1, T, L)
    w = w[0].float()                                                               # (T, L)
    keys = list(text) + ["<eos>"]
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2):
        return False, ("expected a list of two pairs, [(input position, weight) for output 0, "
                       "(input position, weight) for output 1]")
    pairs = []
    for p, item in enumerate(answer):
        pair = _pair(item, p, len(keys))
        if isinstance(pair, str):
            return False, pair
        pairs.append(pair)
    right = [(int(w[p].argmax()), w[p].max().item()) for p in (0, 1)]

    def same(a: tuple[int, float], b: tuple[int, float]) -> bool:
        return a[0] == b[0] and abs(a[1] - b[1]) < 1e-3

    if all(same(a, b) for a, b in zip(pairs, right)):
        said = "; ".join(f"output {p} reads {keys[j]!r} at input position {j} with weight {x:.3f}"
                         for p, (j, x) in enumerate(right))
        return True, said
    if w.shape[0] > 2 and all(same(a, (int(w[p].argmax()), w[p].max().item())) for a, p in zip(pairs, (1, 2))):
        return False, "these are outputs 1 and 2; row 0 of the weights is already the first output digit (no start token)"
    for p, ((j, x), (rj, rx)) in enumerate(zip(pairs, right)):
        if j == rj + 1:
            return False, f"output {p}: one position too far? input positions count from 0 (the first character is 0)"
        if j != rj:
            return False, (f"output {p}: input position {j} is not the one it reads most: take the "
                           f"argmax of its row of weights over the {len(keys)} input positions")
        if not 0 <= x <= 1:
            return False, f"output {p}: {x:g} is not an attention weight, which lies between 0 and 1"
        if abs(x - rx) >= 1e-3:
            return False, (f"output {p}: the position is right, but its weight is not {x:.3f}: give the weight of "
                           f"that position, the largest of the row")
    return False, "expected the position and weight of the most read input character of outputs 0 and 1"
