"""Checkers for notebook 08: the guided tasks "which head does X?" (8.1 the answer head, 8.2 the head that changes
least with the digits: every head that one input cannot tell from the best is accepted) and the three exercises at
the end (8.3 an explorer of the answer head's worst probe input, 8.4 the answer head's hit rate, 8.5 where the
century rows of a two-digit-year date put their weight)."""
from __future__ import annotations

import numbers
import operator
from typing import Any

import numpy as np
import torch

from . import checker


def _index(value: Any) -> int | None:
    """``value`` as a Python int when it is an integer of any kind (int, numpy or 0-d torch integer), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _choice(answer: Any, scores: torch.Tensor) -> tuple[int, int]:
    """``(layer, head)`` from a pair or from an explorer (its ``.layer`` and ``.head``), checked against ``scores``."""
    if hasattr(answer, "layer") and hasattr(answer, "head"):
        answer = (answer.layer, answer.head)
    pair = [_index(v) for v in answer] if isinstance(answer, (tuple, list)) and len(answer) == 2 else [None]
    if None in pair:
        raise ValueError(f"expected (layer, head) as two ints, e.g. (0, 2), or the explorer itself; got {answer!r}")
    layer, head = pair
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


def _worst_inputs(W: torch.Tensor, probe: torch.Tensor) -> tuple[tuple[int, int], torch.Tensor]:
    """The Task A head ``(layer, head)`` and ``(layers, heads)``: for every head, the probe input on which it puts
    the least weight on the answer (averaged over the rows)."""
    holds = (probe.sort(dim=1).values[:, :, None] == probe[:, None, :]).float()    # (N, query, key)
    on_answer = (W * holds[:, None, None]).sum(-1).mean(-1)                       # (N, layers, heads)
    best = divmod(int(on_answer.mean(0).argmax()), W.shape[2])
    return best, on_answer


@checker("8.3")
def worst_input_explorer(answer: Any, *, W: torch.Tensor, probe: torch.Tensor) -> tuple[bool, str]:
    """Exercise 1: an ``AttentionExplorer`` of the sorter's attention on the probe input where the Task A head puts
    the least weight on the answer (its rows averaged): every layer and head, opened on the Task A head, keys
    labelled ``digit@position``, queries labelled ``digit@position`` or by their output ``#i: d``.

    ``W (N, layers, heads, L, L)``: the probe maps; ``probe (N, L)``: the probe digits."""
    from ..viz.widgets import AttentionExplorer, AttentionHeatmap

    if isinstance(answer, AttentionHeatmap):
        return False, "an AttentionHeatmap shows one map; build an AttentionExplorer, which shows every layer and head"
    if not isinstance(answer, AttentionExplorer):
        return False, f"expected an AttentionExplorer, got {type(answer).__name__}"
    W = W.float()
    (layer, head), on_answer = _worst_inputs(W, probe)
    n_layers, n_heads, L = W.shape[1], W.shape[2], W.shape[3]
    got = torch.as_tensor(answer.weights.copy()).float()
    if tuple(got.shape) != (n_layers, n_heads, L, L):
        return False, (f"your explorer holds maps of shape {tuple(got.shape)}; the sorter's attention on one probe "
                       f"input is ({n_layers}, {n_heads}, {L}, {L}): every layer and head of that one input")
    task_a = "the Task A head (best_a)"
    gap = (W - got).abs().amax(dim=(1, 2, 3, 4))                                  # (N,): how far from each input
    if gap.min() > 1e-4:
        return False, ("these maps are not the sorter's attention on any one probe input: take the maps of one "
                       "input from W (or run the sorter on its digits) and pass them unchanged")
    j = int(gap.argmin())
    worst = on_answer.argmin(0)                                                   # (layers, heads)
    if j != int(worst[layer, head]):
        if j == int(on_answer[:, layer, head].argmax()):
            return False, f"this is the input where {task_a} puts the MOST weight on the answer; find the least"
        others = [(l, h) for l in range(n_layers) for h in range(n_heads) if int(worst[l, h]) == j]
        if others:
            return False, (f"this is the worst input of layer {others[0][0]}, head {others[0][1]}; use {task_a}, "
                           f"the head with the highest average weight on the answer")
        return False, (f"on this input {task_a} puts {on_answer[j, layer, head].item():.3f} on the answer; some "
                       f"probe input gets less: average its rows' weight on the answer per input, take the argmin")
    digits = probe[j].tolist()
    keys = [f"{d}@{i}" for i, d in enumerate(digits)]
    if list(answer.key_tokens) != keys:
        first = next(i for i, (a, b) in enumerate(zip(answer.key_tokens, keys)) if a != b)
        return False, (f"label the keys digit@position, the input's digits in their order: key {first} should be "
                       f"{keys[first]!r}, yours is {answer.key_tokens[first]!r}")
    outputs = [f"#{i}: {d}" for i, d in enumerate(sorted(digits))]
    if list(answer.query_tokens) not in (keys, outputs):
        first = next(i for i, (a, b, c) in enumerate(zip(answer.query_tokens, keys, outputs)) if a not in (b, c))
        return False, (f"label the queries like the keys (digit@position) or by what they must output (#i: d): "
                       f"query {first} should be {keys[first]!r} or {outputs[first]!r}, yours is "
                       f"{answer.query_tokens[first]!r}")
    if (answer.layer, answer.head) != (layer, head):
        return False, (f"the right input and labels, but the explorer opens on layer {answer.layer}, head "
                       f"{answer.head}: open it on {task_a} with its layer= and head= arguments")
    return True, (f"the input on which {task_a} puts the least weight on the answer, every layer and head, opened "
                  f"on that head")


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


def _century_rows(dater, dates) -> torch.Tensor:
    """The date model's weights ``(N, T, L)`` on ``dates`` (one format, no padding), greedy decoding."""
    from ..decoding import greedy_decode

    with torch.no_grad():
        _, w = greedy_decode(dater, dates.src, dates.src_key_padding_mask, max_len=dates.tgt.shape[1],
                             return_attention=True)
    return w.float()


@checker("8.5")
def century_weights(answer: Any, *, dater, dates) -> tuple[bool, str]:
    """Exercise 3: over ``dates`` (all written like ``27.11.31``), the average weight that the two century rows
    (output positions 0 and 1) put on each input position: 9 numbers (the 8 characters, then ``<eos>``)."""
    if any(len(text) != 8 for text in dates.src_raw):
        raise ValueError("8.5 expects dates written like 27.11.31 only (attnlib.make_dates(..., formats=[1]))")
    w = _century_rows(dater, dates)                                               # (N, T, 9)
    n_keys = w.shape[-1]
    right = w[:, :2].mean(dim=(0, 1))                                             # (9,)
    if isinstance(answer, (str, bytes)):
        return False, f"expected {n_keys} numbers, one per input position, got a string"
    try:
        got = torch.as_tensor(np.asarray(answer.detach().cpu() if isinstance(answer, torch.Tensor) else answer,
                                         dtype=np.float64)).float()
    except (TypeError, ValueError):
        return False, f"expected {n_keys} numbers, one per input position, got {type(answer).__name__}"
    if got.shape == (2, n_keys):
        return False, "one row per century output: average over the two rows as well, to get one number per position"
    if got.shape == (len(dates), n_keys) or got.shape == (len(dates), 2, n_keys):
        return False, "one row per date: average over the dates as well"
    if got.numel() == 1:
        return False, f"one number: give one per input position, {n_keys} in all (the 8 characters, then <eos>)"
    if got.shape != (n_keys,):
        return False, (f"expected {n_keys} numbers, one per input position (the 8 characters, then <eos>), got shape "
                       f"{tuple(got.shape)}")

    def near(x: torch.Tensor) -> bool:
        return bool(torch.allclose(got, x, atol=1e-4))

    if near(right):
        even = 1 / n_keys
        return True, (f"the century rows put {right[6]:.3f} on the tens digit of the year (position 6) and "
                      f"{right[7]:.3f} on its units digit (position 7); even spreading gives {even:.3f}")
    if near(w[:, 1:3].mean(dim=(0, 1))):
        return False, "these are outputs 1 and 2; row 0 of the weights is already the first output digit (no start token)"
    for p in (0, 1):
        if near(w[:, p].mean(0)):
            return False, f"that is output {p} alone; average over both century rows, outputs 0 and 1"
    if near(w[:, :2].sum(1).mean(0)):
        return False, "your numbers sum to 2: you added the two rows; average them instead"
    if near(torch.nn.functional.one_hot(w[:, :2].argmax(-1), n_keys).float().mean(dim=(0, 1))):
        return False, ("that counts where each row's LARGEST weight sits (notebook 02's measure); average the "
                       "weights themselves")
    if near(w.mean(dim=(0, 1))):
        return False, "that averages every output row; keep only the two century rows (outputs 0 and 1)"
    if abs(got.sum().item() - 1) > 1e-3:
        return False, (f"your numbers sum to {got.sum().item():.3f}; averages of attention rows sum to 1: average "
                       f"the weights of outputs 0 and 1 over the dates")
    j = int((got - right).abs().argmax())
    return False, (f"at input position {j}, {got[j].item():.3f} is not the century rows' average weight: average "
                   f"the weights of outputs 0 and 1 over all {len(dates)} dates")
