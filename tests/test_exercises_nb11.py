"""Notebook 11's checkers: each accepts the right answer and rejects the mistakes learners make."""
from __future__ import annotations

import re
import types

import pytest
import torch

from attnlib.exercises import check


def right_mask():
    return torch.ones(3, 8, dtype=torch.bool).tril(5)


@pytest.mark.parametrize("wrong, says", [
    (torch.ones(3, 8, dtype=torch.bool).tril(), "diagonal is not shifted"),
    (torch.ones(3, 3, dtype=torch.bool).tril(), "covers only the new tokens"),
    (~torch.ones(3, 8, dtype=torch.bool).tril(5), "polarity"),
    (torch.ones(3, 8).tril(5), "dtype"),
    (torch.ones(3, 8, dtype=torch.bool).tril(6), "may see the future key 6"),
])
def test_11_1_rejects_typical_mistakes(wrong, says):
    verdict = check("11.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_1_accepts_the_right_mask():
    assert check("11.1", right_mask(), quiet=True)


class CopyingStub(torch.nn.Module):
    """Stands in for notebook 11's attention-only model: it copies the repeat perfectly unless the layer-1 head
    or one of the ``needed`` layer-0 heads is zeroed; ``partial`` heads, when zeroed, blur the copy a little."""

    def __init__(self, needed, partial=()):
        super().__init__()
        self.attns = [types.SimpleNamespace(num_heads=2), types.SimpleNamespace(num_heads=1)]
        self.needed, self.partial = set(needed), set(partial)

    def forward(self, ids, head_masks=None):
        B, T = ids.shape
        logits = torch.zeros(B, T, 8)
        masks = head_masks or [torch.ones(2), torch.ones(1)]
        broken = masks[1][0] == 0 or any(masks[0][h] == 0 for h in self.needed)
        blur = any(masks[0][h] == 0 for h in self.partial)
        if not broken:  # the next token after position t >= n is ids[t - n + 1]
            n = T // 2
            strength = 1.5 if blur else 20.0
            logits[:, n:-1].scatter_(-1, ids[:, 1:n, None], strength)
        return logits


PROBE = torch.cat([torch.stack([torch.randperm(8, generator=torch.Generator().manual_seed(i))[:6]
                                for i in range(4)])] * 2, 1)  # (4, 12): 6 distinct tokens, twice


MODELS = [CopyingStub(needed={1}), CopyingStub(needed={0}, partial={1})]  # two models with different tables


def check_table(answer, models=MODELS):
    return check("11.2", answer, quiet=True, models=models, probe=PROBE)


def copy_losses(model, masks):
    """What a learner measures with the notebook's probe(): (first-copy loss, second-copy loss)."""
    n = PROBE.shape[1] // 2
    logits = model(PROBE, head_masks=masks)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), PROBE[:, 1:], reduction="none")
    return loss[:, : n - 1].mean().item(), loss[:, n:].mean().item()


def one_off(model, layer, head):
    masks = [torch.ones(a.num_heads) for a in model.attns]
    masks[layer][head] = 0.0
    return masks


def right_table(model):
    table = {}
    for layer, attn in enumerate(model.attns):
        for h in range(attn.num_heads):
            first, second = copy_losses(model, one_off(model, layer, h))
            table[(layer, h)] = first - second
    return table


def cumulative_table(model):  # one mask list, never reset: later entries have several heads zeroed
    masks, table = [torch.ones(a.num_heads) for a in model.attns], {}
    for layer, attn in enumerate(model.attns):
        for h in range(attn.num_heads):
            masks[layer][h] = 0.0
            first, second = copy_losses(model, masks)
            table[(layer, h)] = first - second
    return table


FROZEN = right_table(MODELS[0])  # a table measured once, on one model


@pytest.mark.parametrize("wrong, says", [
    (cumulative_table, "with that head alone zeroed"),
    (lambda m: {k: -v for k, v in right_table(m).items()}, "sign is reversed"),
    (lambda m: {k: copy_losses(m, one_off(m, *k))[1] for k in right_table(m)}, "second-copy loss alone"),
    (lambda m: {k: v for k, v in right_table(m).items() if k[0] == 0}, "one entry per head of every layer"),
    (lambda m: {i: v for i, v in enumerate(right_table(m).values())}, "(layer, head) pairs"),
    (lambda m: FROZEN, "same table for two different models"),
    (lambda m: list(right_table(m).values()), "expected a dict"),
    (FROZEN, "a function"),
])
def test_11_2_rejects_typical_mistakes(wrong, says):
    verdict = check_table(wrong)
    assert verdict.ok is False and says in verdict.message


def test_11_2_accepts_the_right_table():
    assert check_table(right_table)


def test_11_2_accepts_tensor_values_and_any_key_order():
    assert check_table(lambda m: {k: torch.tensor(v) for k, v in reversed(list(right_table(m).items()))})


def test_11_2_never_prints_a_measured_gap_when_wrong():
    verdict = check_table(cumulative_table)
    assert verdict.ok is False and set(re.findall(r"\d+\.\d+", verdict.message)) <= {"0.001"}


def test_11_2_refuses_a_model_that_does_not_copy():
    untrained = CopyingStub(needed=set())
    untrained.forward = lambda ids, head_masks=None: torch.zeros(*ids.shape, 8)
    verdict = check_table(right_table, models=[MODELS[0], untrained])
    assert verdict.ok is False and "does not copy yet" in verdict.message


def test_11_2_asks_for_the_models_when_they_are_missing():
    assert check("11.2", right_table, quiet=True).ok is False


def right_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


@pytest.mark.parametrize("wrong, says", [
    (lambda x, k: x.masked_fill(x < x.topk(k, dim=-1).values[:, -1:], 0.0), "use -inf"),
    (lambda x, k: x.masked_fill(x <= x.topk(k, dim=-1).values[:, -1:], float("-inf")), "must keep exactly"),
    (lambda x, k: x.masked_fill(x > x.topk(k, dim=-1).values[:, -1:], float("-inf")), "must keep exactly"),
    (lambda x, k: right_top_k(x, k).softmax(-1), "unchanged"),
    (lambda x, k: x.topk(k, dim=-1).values, "expected a tensor of shape (4, 10)"),
])
def test_11_3_rejects_typical_mistakes(wrong, says):
    verdict = check("11.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_11_3_accepts_the_right_filter():
    assert check("11.3", right_top_k, quiet=True)
