"""Notebook 11's checkers: each accepts the right answer and rejects the mistakes learners make."""
from __future__ import annotations

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


def check_heads(answer, model):
    return check("11.2", answer, quiet=True, model=model, probe=PROBE)


@pytest.mark.parametrize("wrong, says", [
    ((0, 0), "copying survives"),            # the layer-0 head that does not matter
    ((1, 0), "induction head itself"),        # the head section 9 already removed
    ((0, 2), "there is no head"),
    (0, "expected a pair"),
    ((0.0, 1.0), "expected a pair"),
])
def test_11_2_rejects_typical_mistakes(wrong, says):
    verdict = check_heads(wrong, CopyingStub(needed={1}))
    assert verdict.ok is False and says in verdict.message


def test_11_2_rejects_a_head_whose_removal_only_blurs_the_copy():
    verdict = check_heads((0, 0), CopyingStub(needed={1}, partial={0}))
    assert verdict.ok is False and "copying survives" in verdict.message


@pytest.mark.parametrize("answer", [(0, 1), [0, 1]])
def test_11_2_accepts_the_needed_head(answer):
    assert check_heads(answer, CopyingStub(needed={1}))


def test_11_2_accepts_either_head_when_both_are_needed():
    model = CopyingStub(needed={0, 1})
    assert check_heads((0, 0), model) and check_heads((0, 1), model)


def test_11_2_never_names_the_answer_when_wrong():
    verdict = check_heads((0, 0), CopyingStub(needed={1}))
    assert "(0, 1)" not in verdict.message


def test_11_2_refuses_a_model_that_does_not_copy():
    untrained = CopyingStub(needed=set())
    untrained.forward = lambda ids, head_masks=None: torch.zeros(*ids.shape, 8)
    verdict = check_heads((0, 1), untrained)
    assert verdict.ok is False and "does not copy yet" in verdict.message


def test_11_2_asks_for_the_model_when_it_is_missing():
    assert check("11.2", (0, 1), quiet=True).ok is False


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
