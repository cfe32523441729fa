"""Notebook 11's checkers: each accepts the right answer and rejects the mistakes learners make."""
from __future__ import annotations

import math
import re

import pytest
import torch

import attnlib
from attnlib.attention import causal_mask
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


class TinyAttentionOnly(torch.nn.Module):
    """Notebook 11's attention-only model, small: embeddings, then x = x + attn(norm(x)) per layer, no MLP."""

    def __init__(self, seed, V=8, T=12, d=16, heads=(2, 1)):
        super().__init__()
        torch.manual_seed(seed)
        self.tok_emb, self.pos_emb = torch.nn.Embedding(V, d), torch.nn.Embedding(T, d)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in heads)
        self.attns = torch.nn.ModuleList(attnlib.MultiHeadAttention(d, h) for h in heads)
        self.norm, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, V)

    def forward(self, ids, head_masks=None):
        x = self.tok_emb(ids) + self.pos_emb.weight[: ids.shape[1]]
        for i, (norm, attn) in enumerate(zip(self.norms, self.attns)):
            z = norm(x)
            x = x + attn(z, z, z, causal=True, head_mask=None if head_masks is None else head_masks[i])[0]
        return self.head(self.norm(x))


PROBE = torch.cat([torch.stack([torch.randperm(8, generator=torch.Generator().manual_seed(i))[:6]
                                for i in range(4)])] * 2, 1)  # (4, 12): 6 distinct tokens, twice
MODELS = [TinyAttentionOnly(0).eval(), TinyAttentionOnly(1).eval()]


def check_patched(answer, models=MODELS):
    return check("11.2", answer, quiet=True, models=models, probe=PROBE)


def patched(m, ids, layer, head, pattern, *, every_head=False, causal=True, scale=True, as_scores=False,
            swap=False):
    """The right answer, and (with a flag) the mistakes learners make."""
    if swap:
        layer, head = head, layer
    B, T = ids.shape
    x = m.tok_emb(ids) + m.pos_emb.weight[:T]
    for i, (norm, attn) in enumerate(zip(m.norms, m.attns)):
        z = norm(x)
        q, k, v = (attn.split_heads(lin(z)) for lin in (attn.w_q, attn.w_k, attn.w_v))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(attn.d_k) if scale else 1.0)
        which = slice(None) if every_head else head
        if i == layer and as_scores:
            scores = scores.clone()
            scores[:, which] = pattern
        if causal:
            scores = scores.masked_fill(~causal_mask(T), float("-inf"))
        w = scores.softmax(-1)
        if i == layer and not as_scores:
            w = w.clone()
            w[:, which] = pattern
        x = x + attn.w_o(attn.merge_heads(w @ v))
    return m.head(m.norm(x))


def patched_weights(m, ids):
    """Layer 0, head 0's own weights (B, T, T), taken from attnlib's attention."""
    z = m.norms[0](m.tok_emb(ids) + m.pos_emb.weight[: ids.shape[1]])
    return m.attns[0](z, z, z, causal=True)[1][:, 0]


def test_11_2_the_stand_in_model_is_what_the_right_answer_computes():
    ids = PROBE[:2]
    with torch.no_grad():  # an all-zero pattern removes the head, as head_masks does; its own weights change nothing
        zeroed = MODELS[0](ids, head_masks=[torch.tensor([0.0, 1.0]), torch.ones(1)])
        assert torch.allclose(patched(MODELS[0], ids, 0, 0, torch.zeros(12, 12)), zeroed, atol=1e-5)
        assert torch.allclose(patched(MODELS[0], ids, 0, 0, patched_weights(MODELS[0], ids)), MODELS[0](ids), atol=1e-5)


def test_11_2_accepts_the_right_function():
    assert check_patched(patched)


def test_11_2_accepts_a_pattern_written_per_sequence():
    def per_sequence(m, ids, layer, head, pattern):
        return patched(m, ids, layer, head, pattern.expand(ids.shape[0], -1, -1))
    assert check_patched(per_sequence)


@pytest.mark.parametrize("wrong, says", [
    (lambda m, ids, layer, head, pattern: m(ids), "without the patch"),
    (lambda *a: patched(*a, every_head=True), "every head of layer"),
    (lambda *a: patched(*a, causal=False), "causal mask"),
    (lambda *a: patched(*a, scale=False), "sqrt(d_k)"),
    (lambda *a: patched(*a, as_scores=True), "not its scores"),
    (lambda *a: patched(*a, swap=True), "instead of head"),
    (lambda m, ids, layer, head, pattern: patched(m, ids, layer, head, pattern)[:, -1], "of shape"),
    (lambda m, ids, layer, head, pattern: patched(m, ids, layer, head, pattern).tolist(), "as a tensor"),
    (lambda m, ids, layer, head, pattern: patched(m, ids, layer, head, pattern) * 1.01, "differ from the model"),
    (torch.zeros(4, 12, 8), "a function"),
])
def test_11_2_rejects_typical_mistakes(wrong, says):
    verdict = check_patched(wrong)
    assert verdict.ok is False and says in verdict.message


def test_11_2_never_prints_numbers_when_wrong():
    verdict = check_patched(lambda m, ids, layer, head, pattern: patched(m, ids, layer, head, pattern) * 1.01)
    assert verdict.ok is False and not re.findall(r"\d+\.\d+", verdict.message)


def test_11_2_refuses_models_that_are_not_the_attention_only_model():
    verdict = check_patched(patched, models=[MODELS[0], torch.nn.Linear(3, 3)])
    assert verdict.ok is False and "not an attention-only model" in verdict.message


def test_11_2_asks_for_the_models_when_they_are_missing():
    assert check("11.2", patched, quiet=True).ok is False


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
