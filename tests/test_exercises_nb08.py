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


def test_tasks_take_any_kind_of_integer():
    import numpy as np

    for pair in [(np.int64(1), np.int64(0)), (torch.tensor(1), torch.tensor(0)), [1, np.int32(0)]]:
        assert task_a(pair), pair
    assert task_b((np.int64(0), torch.tensor(0)))
    for bad in [(1.0, 0), (True, False), (torch.tensor(1.0), 0)]:              # floats and bools are not a layer
        v = task_a(bad)
        assert v.ok is False and "expected (layer, head)" in v.message, (bad, v.message)


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
    assert check("8.3", None, quiet=True, W=torch.zeros(1), probe=torch.zeros(1)).ok is None
    assert check("8.4", None, quiet=True, W=torch.zeros(1), probe=torch.zeros(1)).ok is None
    assert check("8.5", None, quiet=True, dater=None, dates=None).ok is None


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


def worst_explorer(W, probe, *, head=None, pick="argmin", keys=None, queries="outputs", opened=None):
    """The solution of Exercise 1, with one thing done wrong."""
    best, holds, _, _ = hit_rates(W, probe)
    layer, h = head or best
    per_input = (W[:, layer, h] * holds).sum(-1).mean(-1)                      # (N,)
    i = int(getattr(per_input, pick)())
    ds = probe[i].tolist()
    key_labels = keys(ds) if keys else [f"{d}@{j}" for j, d in enumerate(ds)]
    query_labels = {"outputs": [f"#{j}: {d}" for j, d in enumerate(sorted(ds))], "keys": key_labels,
                    "digits": [str(d) for d in ds]}[queries]
    at = opened or best
    return AttentionExplorer(W[i], query_labels, key_labels, layer=at[0], head=at[1])


def test_8_3_accepts_the_worst_input_with_either_query_labels(probe_maps):
    W, probe = probe_maps
    for queries in ("outputs", "keys"):
        v = check("8.3", worst_explorer(W, probe, queries=queries), quiet=True, W=W, probe=probe)
        assert v, v.message


def test_8_3_a_fresh_run_of_the_sorter_matches_the_batch_maps(sorter, probe_maps):
    W, probe = probe_maps
    best, holds, _, _ = hit_rates(W, probe)
    i = int((W[:, best[0], best[1]] * holds).sum(-1).mean(-1).argmin())
    with torch.no_grad():
        _, per_layer = sorter(probe[i:i + 1], return_attention=True)           # one input, not the batch
    ds = probe[i].tolist()
    mine = AttentionExplorer([m[0] for m in per_layer], [f"{d}@{j}" for j, d in enumerate(ds)], layer=best[0], head=best[1])
    assert check("8.3", mine, quiet=True, W=W, probe=probe)


def test_8_3_rejects_typical_mistakes(probe_maps):
    W, probe = probe_maps
    best, _, _, _ = hit_rates(W, probe)
    other = (1 - best[0], best[1])
    mistakes = [
        (dict(pick="argmax"), "MOST weight"),
        (dict(head=other), "worst input of layer"),
        (dict(keys=lambda ds: [str(d) for d in ds]), "label the keys digit@position"),       # the 3, 1, 4, 1
        (dict(keys=lambda ds: [f"{j}@{d}" for j, d in enumerate(ds)]), "label the keys digit@position"),
        (dict(queries="digits"), "label the queries"),
        (dict(opened=(0, 0) if best != (0, 0) else (0, 1)), "open it on the Task A head"),
    ]
    for mistake, says in mistakes:
        v = check("8.3", worst_explorer(W, probe, **mistake), quiet=True, W=W, probe=probe)
        assert v.ok is False and says in v.message, (mistake, v.message)


def test_8_3_other_answers_are_feedback(probe_maps):
    W, probe = probe_maps
    best, holds, _, _ = hit_rates(W, probe)
    ds = probe[0].tolist()
    labels = [f"{d}@{j}" for j, d in enumerate(ds)]
    v = check("8.3", AttentionHeatmap(W[0, 1, 0], labels), quiet=True, W=W, probe=probe)
    assert v.ok is False and "AttentionHeatmap shows one map" in v.message
    v = check("8.3", W[0], quiet=True, W=W, probe=probe)
    assert v.ok is False and "expected an AttentionExplorer, got Tensor" in v.message
    v = check("8.3", AttentionExplorer(W[:, 1].mean(0)[None], labels), quiet=True, W=W, probe=probe)
    assert v.ok is False and "every layer and head" in v.message                # one layer only
    v = check("8.3", AttentionExplorer(W.mean(0), labels), quiet=True, W=W, probe=probe)
    assert v.ok is False and "not the sorter's attention on any one probe input" in v.message   # the mean map
    per_input = (W[:, best[0], best[1]] * holds).sum(-1).mean(-1)
    second = int(per_input.argsort()[1])                                       # the second worst
    ds = probe[second].tolist()
    v = check("8.3", AttentionExplorer(W[second], [f"{d}@{j}" for j, d in enumerate(ds)], layer=best[0], head=best[1]),
              quiet=True, W=W, probe=probe)
    assert v.ok is False and "some probe input gets less" in v.message


def test_8_4_accepts_the_hit_rate_of_the_task_a_head(probe_maps):
    W, probe = probe_maps
    best, _, _, rates = hit_rates(W, probe)
    v = check("8.4", rates[best].item(), quiet=True, W=W, probe=probe)
    assert v and f"layer {best[0]}, head {best[1]}" in v.message
    assert check("8.4", torch.tensor(rates[best].item()), quiet=True, W=W, probe=probe)   # a 0-d tensor is fine


def test_8_4_rejects_typical_mistakes(probe_maps):
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
    dater, _ = attnlib.load_seq2seq(model_path("date_attention.pt"))
    data = attnlib.make_dates(16, seed=5, formats=[1])                              # written like 27.11.31
    _, w = attnlib.greedy_decode(dater, data.src, data.src_key_padding_mask, max_len=data.tgt.shape[1],
                                 return_attention=True)
    return dict(dater=dater, dates=data), w                                     # w: (16, 11, 9)


def test_8_5_accepts_the_century_rows_average_in_any_container(dates):
    context, w = dates
    right = w[:, :2].mean(dim=(0, 1))
    for answer in (right, right.numpy(), right.tolist(), [round(x, 5) for x in right.tolist()]):
        v = check("8.5", answer, quiet=True, **context)
        assert v and "position 6" in v.message, v.message


def test_8_5_rejects_typical_mistakes(dates):
    import torch.nn.functional as F

    context, w = dates
    right = w[:, :2].mean(dim=(0, 1))
    for wrong, says in [(w[:, 1:3].mean(dim=(0, 1)), "these are outputs 1 and 2"),
                        (w[:, 0].mean(0), "output 0 alone"),
                        (w[:, 1].mean(0), "output 1 alone"),
                        (w[:, :2].sum(1).mean(0), "you added the two rows"),
                        (F.one_hot(w[:, :2].argmax(-1), 9).float().mean(dim=(0, 1)), "LARGEST weight"),
                        (w.mean(dim=(0, 1)), "averages every output row"),
                        (w[:, :2].sum(dim=(0, 1)), "sum to"),
                        (w[:, :2].mean(0), "average over the two rows as well"),
                        (w[:, :2].mean(1), "average over the dates as well"),
                        (right[6], "give one per input position"),
                        (right[:8], "expected 9 numbers"),
                        ("0.5", "expected 9 numbers"),
                        (right + torch.tensor([0.0] * 6 + [0.06, -0.04, -0.02]), "at input position 6")]:
        v = check("8.5", wrong, quiet=True, **context)
        assert v.ok is False and says in v.message, (says, v.message)


def test_8_5_never_prints_the_right_numbers(dates):
    context, w = dates
    right = w[:, :2].mean(dim=(0, 1))
    wrong = right + torch.tensor([0.0] * 6 + [0.06, -0.04, -0.02])
    message = check("8.5", wrong, quiet=True, **context).message
    assert all(f"{x:.3f}" not in message for x in right.tolist() if x > 0.01), message


def test_8_4_takes_any_kind_of_number_but_not_a_table(probe_maps):
    import numpy as np

    W, probe = probe_maps
    best, _, _, rates = hit_rates(W, probe)
    assert check("8.4", np.float32(rates[best].item()), quiet=True, W=W, probe=probe)
    v = check("8.4", rates, quiet=True, W=W, probe=probe)                  # every head's rate at once
    assert v.ok is False and "expected one number" in v.message


def test_tied_heads_both_win():
    from attnlib.exercises.nb08 import _wins

    per_input = torch.rand(50, 2, 4)
    per_input[:, 0, 3] = per_input[:, 0, 2]  # head (0, 3) is an exact copy of head (0, 2)
    assert torch.equal(_wins(per_input, highest=True)[0, 2], _wins(per_input, highest=True)[0, 3])
    assert torch.equal(_wins(per_input, highest=False)[0, 2], _wins(per_input, highest=False)[0, 3])
