"""Checkers of notebook 08: the guided tasks accept every head one input cannot tell from the best and reject the
others; the exercises reject the usual mistakes."""
from __future__ import annotations

import types

import torch

from attnlib.exercises import check

N, L = 400, 6
PROBE = torch.randint(0, 10, (N, L), generator=torch.Generator().manual_seed(0))
HOLDS = (PROBE.sort(dim=1).values[:, :, None] == PROBE[:, None, :]).float()    # (N, query, key)
ANSWER = HOLDS / HOLDS.sum(-1, keepdim=True)                                   # all weight on the answer key(s)
UNIFORM = torch.full((N, L, L), 1 / L)


def noisy_uniform(seed, size=0.02):
    noise = size * torch.rand(N, L, L, generator=torch.Generator().manual_seed(seed))
    return (UNIFORM + noise) / (UNIFORM + noise).sum(-1, keepdim=True)


def maps_of(**heads):
    """W (N, 2 layers, 2 heads, L, L) from maps named l0h0, l0h1, l1h0, l1h1."""
    return torch.stack([torch.stack([heads["l0h0"], heads["l0h1"]], 1), torch.stack([heads["l1h0"], heads["l1h1"]], 1)], 1)


SOMETIMES = (torch.arange(N) % 10 == 0)[:, None, None]                          # one input in ten
W = maps_of(l0h0=UNIFORM, l0h1=0.5 * ANSWER + 0.5 * UNIFORM,                # (0, 0) uniform: never changes
               l1h0=0.9 * ANSWER + 0.1 * UNIFORM,                                # (1, 0) best on 9 inputs in 10
               l1h1=torch.where(SOMETIMES, ANSWER, UNIFORM))                     # (1, 1) best on 1 input in 10


def task_a(answer, maps=W):
    return check("8.1", answer, quiet=True, W=maps, probe=PROBE)


def task_b(answer, maps=W):
    return check("8.2", answer, quiet=True, W=maps, probe=PROBE)


def test_task_a_accepts_every_head_one_input_can_show_as_best():
    assert task_a((1, 0)) and task_a(types.SimpleNamespace(layer=1, head=0))   # a pair, or anything with .layer/.head
    assert task_a((1, 1))                                                        # best on 10% of the inputs only
    assert "10.0% of the 400 inputs" in task_a((1, 1)).message


def test_task_a_rejects_heads_that_never_lead():
    v = task_a((0, 0))
    assert v.ok is False and "even spreading" in v.message and "0.0%" in v.message
    v = task_a((0, 1))                                                           # well above chance, never the best
    assert v.ok is False and "another head beats it" in v.message
    assert "(1, 0)" not in v.message and "layer 1, head 0" not in v.message       # never names the answer


def test_task_b_accepts_heads_it_cannot_separate_and_rejects_the_others():
    assert task_b((0, 0))
    twins = maps_of(l0h0=noisy_uniform(1), l0h1=noisy_uniform(2), l1h0=ANSWER, l1h1=torch.where(SOMETIMES, ANSWER, UNIFORM))
    assert task_b((0, 0), twins) and task_b((0, 1), twins)                      # the 0.012 / 0.012 tie of the issue
    v = task_b((1, 0), twins)                                                    # all weight on the answer: moves most
    assert v.ok is False and "MOST" in v.message
    v = task_b((0, 1))
    assert v.ok is False and "stays pale" in v.message


def test_bad_shapes_of_answer_are_feedback_not_a_crash():
    for bad, says in [((2, 0), "layer must be in [0, 1]"), ((0,), "expected (layer, head)"), ("L0H2", "expected (layer, head)"),
                      ((0.0, 2.0), "expected (layer, head)")]:
        for task in (task_a, task_b):
            v = task(bad)
            assert v.ok is False and says in v.message, (bad, v.message)


# ---------------------------------------------------------------------------------------------
# Exercises 1-3 (8.3-8.5), against the saved models (they load in well under a second)

import pytest  # noqa: E402

import attnlib  # noqa: E402
from attnlib import AttentionExplorer, AttentionHeatmap, TransformerTagger  # noqa: E402
from attnlib.paths import model_path  # noqa: E402


@pytest.fixture(scope="module")
def sorter():
    return TransformerTagger.load(model_path("sort_transformer.pt"))[0]


def test_placeholders_are_not_attempted(sorter):
    assert check("8.3", None, quiet=True, sorter=sorter).ok is None
    assert check("8.4", None, quiet=True, W=torch.zeros(1), probe=torch.zeros(1)).ok is None
    assert check("8.5", None, quiet=True, dater=None, src_vocab=None, text="27.11.31").ok is None


def maps(sorter, digits):
    with torch.no_grad():
        _, per_layer = sorter(torch.tensor([digits]), return_attention=True)
    return [m[0] for m in per_layer]


def explore_with(sorter, *, feed=lambda ds: ds, layers=slice(None), label=lambda d, i: f"{d}@{i}", fixed=None,
                 kind="explorer"):
    """The solution of Exercise 1, with one thing done wrong."""
    def explore(text):
        ds = [int(c) for c in text]
        per_layer = maps(sorter, fixed or feed(ds))[layers]
        labels = [label(d, i) for i, d in enumerate(fixed or ds)]
        if kind == "tensor":
            return torch.stack(per_layer)
        if kind == "heatmap":
            return AttentionHeatmap(per_layer[-1][0], labels)
        return AttentionExplorer(per_layer, labels)
    return explore


def test_8_2_accepts_the_explorer_of_the_text(sorter):
    v = check("8.3", explore_with(sorter), quiet=True, sorter=sorter)
    assert v and "2 layers x 4 heads" in v.message


@pytest.mark.parametrize("mistake, says", [
    (dict(fixed=[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]), "not the π digits"),   # the maps of section 2, whatever the text
    (dict(feed=sorted), "maps of the sorted digits"),
    (dict(layers=slice(-1, None)), "pass the maps of every layer"),
    (dict(label=lambda d, i: str(d)), "label the tokens digit@position"),
    (dict(kind="tensor"), "should return an AttentionExplorer, got Tensor"),
    (dict(kind="heatmap"), "an AttentionHeatmap shows one map"),
])
def test_8_2_rejects_typical_mistakes(sorter, mistake, says):
    v = check("8.3", explore_with(sorter, **mistake), quiet=True, sorter=sorter)
    assert v.ok is False and says in v.message, v.message


def test_8_2_a_function_that_ignores_its_text_is_named(sorter):
    fixed = explore_with(sorter)("905172638405")
    v = check("8.3", lambda text: fixed, quiet=True, sorter=sorter)
    assert v.ok is False and "4 digits give 4 x 4" in v.message
    backwards = check("8.3", explore_with(sorter, feed=lambda ds: ds[::-1]), quiet=True, sorter=sorter)
    assert backwards.ok is False and "differs from the sorter's attention" in backwards.message


def test_8_2_a_crash_and_a_non_function_are_feedback(sorter):
    assert "expected a function" in check("8.3", 42, quiet=True, sorter=sorter).message
    v = check("8.3", lambda text: AttentionExplorer(torch.ones(2, 4, 3, 3), list("abc")), quiet=True, sorter=sorter)
    assert v.ok is False and "ValueError" in v.message                          # rows that do not sum to 1


@pytest.fixture(scope="module")
def probe_maps(sorter):
    g = torch.Generator().manual_seed(3)
    probe = torch.randint(0, 10, (300, 12), generator=g)
    with torch.no_grad():
        _, per_layer = sorter(probe, return_attention=True)
    return torch.stack(per_layer, dim=1), probe                                # (300, layers, heads, 12, 12), (300, 12)


def hit_rates(W, probe):
    """The notebook's Task A and Exercise 2, for every head: (best head, holds_answer, answer_weight, rates)."""
    holds = (probe.sort(dim=1).values[:, :, None] == probe[:, None, :]).float()
    answer_weight = (W * holds[:, None, None]).sum(-1).mean(dim=(0, 3))
    best = divmod(int(answer_weight.argmax()), W.shape[2])
    rates = torch.tensor([[holds.gather(2, W[:, l, h].argmax(-1)[..., None]).mean().item() for h in range(W.shape[2])]
                          for l in range(W.shape[1])])
    return best, holds, answer_weight, rates


def test_8_3_accepts_the_hit_rate_of_the_task_a_head(probe_maps):
    W, probe = probe_maps
    best, _, _, rates = hit_rates(W, probe)
    v = check("8.4", rates[best].item(), quiet=True, W=W, probe=probe)
    assert v and f"layer {best[0]}, head {best[1]}" in v.message
    assert check("8.4", torch.tensor(rates[best].item()), quiet=True, W=W, probe=probe)   # a 0-d tensor is fine


def test_8_3_rejects_typical_mistakes(probe_maps):
    W, probe = probe_maps
    best, holds, answer_weight, rates = hit_rates(W, probe)
    other = (1 - best[0], best[1])
    own = (probe[:, :, None] == probe[:, None, :]).float()
    own_rate = own.gather(2, W[:, best[0], best[1]].argmax(-1)[..., None]).mean().item()
    by_query = holds.gather(2, W[:, best[0], best[1]].argmax(-2)[..., None]).mean().item()
    for wrong, says in [(rates[other].item(), f"rate of layer {other[0]}, head {other[1]}"),
                        (answer_weight[best].item(), "average weight on the answer"),
                        (holds.mean().item(), "chance level"),
                        (100 * rates[best].item(), "percentage"),
                        (rates[best].item() * holds[:, :, 0].numel(), "not a share"),
                        (own_rate, "query's own digit"),
                        (by_query, "argmax over the queries"),
                        ("0.5", "expected one number")]:
        v = check("8.4", wrong, quiet=True, W=W, probe=probe)
        assert v.ok is False and says in v.message, (wrong, says, v.message)


@pytest.fixture(scope="module")
def dates():
    dater, info = attnlib.load_seq2seq(model_path("date_attention.pt"))
    src_vocab = info["src_vocab"]
    ids, w = attnlib.greedy_decode(dater, torch.tensor([src_vocab.encode("27.11.31")]), return_attention=True)
    return dict(dater=dater, src_vocab=src_vocab, text="27.11.31"), w[0]


def reads(w, outputs=(0, 1)):
    return [(int(w[p].argmax()), w[p].max().item()) for p in outputs]


def test_8_4_accepts_position_and_weight_also_rounded_as_printed(dates):
    context, w = dates
    assert check("8.5", reads(w), quiet=True, **context)
    assert check("8.5", [(j, round(x, 3)) for j, x in reads(w)], quiet=True, **context)
    assert check("8.5", [(torch.tensor(j), torch.tensor(x)) for j, x in reads(w)], quiet=True, **context)


def test_8_4_rejects_typical_mistakes(dates):
    context, w = dates
    right = reads(w)
    (j0, x0), (j1, x1) = right
    for wrong, says in [([(j + 1, x) for j, x in right], "count from 0"),
                        ([(x, j) for j, x in right], "swapped"),
                        ([("27.11.31<"[j], x) for j, x in right], "not the character"),
                        (reads(w, (1, 2)), "these are outputs 1 and 2"),
                        ([(j0, x0), (j1, w[1].min().item())], "its weight is not"),
                        ([(j0, x0), ((j1 + 3) % w.shape[1], x1)], "is not the one it reads most"),
                        ([j0, j1], "should be a pair"),
                        ((j0, x0), "should be a pair")]:
        v = check("8.5", wrong, quiet=True, **context)
        assert v.ok is False and says in v.message, (wrong, says, v.message)


def test_8_3_takes_any_kind_of_number_but_not_a_table(probe_maps):
    import numpy as np

    W, probe = probe_maps
    best, _, _, rates = hit_rates(W, probe)
    assert check("8.4", np.float32(rates[best].item()), quiet=True, W=W, probe=probe)
    v = check("8.4", rates, quiet=True, W=W, probe=probe)                  # every head's rate at once
    assert v.ok is False and "expected one number" in v.message


def test_8_5_never_names_the_right_position(dates):
    context, w = dates
    (j0, x0), (j1, x1) = reads(w)
    for wrong in ([(j0 + 1, x0), (j1, x1)], [(j0, x0), ((j1 + 3) % w.shape[1], x1)]):
        message = check("8.5", wrong, quiet=True, **context).message
        assert str(j0 if wrong[0][0] != j0 else j1) not in message.replace("count from 0", "").replace("is 0", ""), message


def test_tied_heads_both_win():
    from attnlib.exercises.nb08 import _wins

    per_input = torch.rand(50, 2, 4)
    per_input[:, 0, 3] = per_input[:, 0, 2]  # head (0, 3) is an exact copy of head (0, 2)
    assert torch.equal(_wins(per_input, highest=True)[0, 2], _wins(per_input, highest=True)[0, 3])
    assert torch.equal(_wins(per_input, highest=False)[0, 2], _wins(per_input, highest=False)[0, 3])
