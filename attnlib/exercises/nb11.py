"""Checkers for notebook 11's exercises (a small GPT with a KV cache)."""
from __future__ import annotations

import math

import torch

from . import checker, require
from .nb00 import callable_problem


@checker("11.1")
def cached_mask(answer) -> tuple[bool, str]:
    """The (3, 8) bool mask of 3 new tokens after 5 cached ones, True = may attend."""
    if not isinstance(answer, torch.Tensor):
        return False, f"expected a torch.Tensor, got {type(answer).__name__}"
    if answer.shape == (3, 3):
        return False, "shape (3, 3) covers only the new tokens; the keys are the 5 cached ones plus the 3 new: (3, 8)"
    if answer.shape != (3, 8):
        return False, f"expected shape (3, 8) (3 new queries, 5 cached + 3 new keys), got {tuple(answer.shape)}"
    if answer.dtype != torch.bool:
        return False, f"expected dtype torch.bool (True = may attend), got {answer.dtype}"
    right = torch.ones(3, 8, dtype=torch.bool).tril(5)
    if torch.equal(answer, ~right):
        return False, "the polarity is inverted: in attnlib True means 'may attend'"
    if torch.equal(answer, torch.ones(3, 8, dtype=torch.bool).tril()):
        return False, "the diagonal is not shifted: new token 0 sits at position 5 and may see the 5 cached tokens"
    wrong = (answer != right).nonzero()
    if len(wrong):
        i, j = wrong[0].tolist()
        what = "may see the future key" if j > 5 + i else "is blocked from the earlier key"
        return False, f"new token {i} (position {5 + i}) {what} {j}"
    return True, "new token i sits at position 5 + i and sees keys 0..5 + i"


def _patched_logits(model, ids: torch.Tensor, layer: int, head: int, pattern: torch.Tensor | None, *,
                    every_head: bool = False, causal: bool = True, scale: bool = True,
                    as_scores: bool = False) -> torch.Tensor:
    """Notebook 11's attention-only model run by hand on ``ids (B, T)``, with the attention weights of head
    ``head`` of layer ``layer`` replaced by ``pattern (T, T)`` (None: no change). Logits ``(B, T, V)``.

    The keyword flags build the mistakes the checker recognises: the pattern given to every head of the layer,
    the causal mask or the 1/sqrt(d_k) left out, the pattern put in place of the scores instead of the weights."""
    from ..attention import causal_mask
    B, T = ids.shape
    x = model.tok_emb(ids) + model.pos_emb.weight[:T]  # (B, T, d)
    allowed = causal_mask(T, device=ids.device)  # (T, T), True = may attend
    for i, (norm, attn) in enumerate(zip(model.norms, model.attns)):
        z = norm(x)
        q, k, v = (attn.split_heads(lin(z)) for lin in (attn.w_q, attn.w_k, attn.w_v))  # (B, h, T, d_k)
        scores = q @ k.transpose(-2, -1) / (math.sqrt(attn.d_k) if scale else 1.0)  # (B, h, T, T)
        which = slice(None) if every_head else head
        if i == layer and pattern is not None and as_scores:
            scores = scores.clone()
            scores[:, which] = pattern
        if causal:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = scores.softmax(-1)
        if i == layer and pattern is not None and not as_scores:
            weights = weights.clone()
            weights[:, which] = pattern
        x = x + attn.w_o(attn.merge_heads(weights @ v))
    return model.head(model.norm(x))  # (B, T, V)


def _random_pattern(T: int, generator: torch.Generator) -> torch.Tensor:
    """A (T, T) causal pattern: each row a random distribution over the keys up to its own position."""
    scores = torch.randn(T, T, generator=generator)
    return scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


@checker("11.2")
def patched_head(answer, models=None, probe=None) -> tuple[bool, str]:
    """A function ``my_patched(m, ids, layer, head, pattern) -> logits (B, T, V)``: notebook 11's attention-only
    model ``m`` run with the weights of head ``head`` of layer ``layer`` replaced by ``pattern (T, T)``, every
    other head unchanged. Compared with the checker's own computation on every head of each of ``models`` (at
    least two), with random causal patterns, on the first sequences of ``probe``."""
    if models is None or probe is None:
        raise ValueError("call check('11.2', my_patched, models=toy_models[:2], probe=PROBE)")
    require(callable_problem(answer, "a function my_patched(m, ids, layer, head, pattern)"))
    ids = probe[:8]
    T = ids.shape[1]
    gen = torch.Generator().manual_seed(0)
    for i, model in enumerate(models):
        parts = ("tok_emb", "pos_emb", "norms", "attns", "norm", "head")
        if not all(hasattr(model, a) for a in parts):
            return False, f"model {i} is not an attention-only model of section 9: pass toy_models[:2]"
        with torch.no_grad():
            plain = model(ids)
            if not torch.allclose(_patched_logits(model, ids, 0, 0, None), plain, atol=1e-4, rtol=1e-4):
                return False, f"model {i} does not compute what section 9's AttentionOnly does: pass toy_models[:2]"
        heads = [(layer, h) for layer, attn in enumerate(model.attns) for h in range(attn.num_heads)]
        for layer, h in heads:
            pattern = _random_pattern(T, gen)
            with torch.no_grad():
                got = answer(model, ids.clone(), layer, h, pattern.clone())
                truth = _patched_logits(model, ids, layer, h, pattern)
            if not isinstance(got, torch.Tensor):
                return False, f"expected the logits as a tensor of shape (B, T, V), got {type(got).__name__}"
            if got.shape != truth.shape:
                return False, (f"expected logits of shape {tuple(truth.shape)} (B, T, V) for ids of shape "
                               f"{tuple(ids.shape)}, got {tuple(got.shape)}")
            size = truth.abs().max().clamp(min=1.0)

            def same(other: torch.Tensor) -> bool:
                return bool(((got - other).abs().max() / size) < 1e-4)

            if same(truth):
                continue
            others = [(l2, h2) for l2, h2 in heads if (l2, h2) != (layer, h)]
            with torch.no_grad():
                mistakes = [
                    (plain, f"at head ({layer}, {h}) your logits are those of the model without the patch: the "
                            "pattern must replace that head's own attention weights"),
                    (_patched_logits(model, ids, layer, h, pattern, every_head=True),
                     f"you gave the pattern to every head of layer {layer}; only head {h} takes it, the other "
                     "heads keep their own weights"),
                    (_patched_logits(model, ids, layer, h, pattern, causal=False),
                     "the heads that keep their own weights must still use the causal mask: without it they "
                     "look at later tokens"),
                    (_patched_logits(model, ids, layer, h, pattern, scale=False),
                     "divide the scores by sqrt(d_k) before the softmax, as attnlib's MultiHeadAttention does"),
                    (_patched_logits(model, ids, layer, h, pattern, as_scores=True),
                     "the pattern replaces the head's attention weights (after the softmax), not its scores"),
                ] + [(_patched_logits(model, ids, l2, h2, pattern),
                      f"the pattern went into head ({l2}, {h2}) instead of head ({layer}, {h}): the arguments "
                      "are (m, ids, layer, head, pattern)") for l2, h2 in others]
            for other, message in mistakes:
                if same(other):
                    return False, message
            return False, (f"model {i}, head ({layer}, {h}): your logits differ from the model run with that "
                           "head's weights replaced by the pattern (embeddings, then x = x + attn(norm(x)) per "
                           "layer, then the final norm and output layer)")
    return True, (f"on all {len(models)} models, every head: the pattern replaces that head's weights and "
                  "everything else is computed as in the model")


@checker("11.3")
def top_k_filter(answer) -> tuple[bool, str]:
    """A function (logits (B, V), k) -> logits with all but the k largest of each row set to -inf."""
    require(callable_problem(answer, "a function my_top_k(logits, k)"))
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, generator=gen)
    for k in (1, 3, 10):
        out = answer(logits.clone(), k)
        if not isinstance(out, torch.Tensor) or out.shape != logits.shape:
            return False, f"expected a tensor of shape {tuple(logits.shape)}, got {getattr(out, 'shape', type(out).__name__)}"
        if torch.isfinite(out).all() and (out >= 0).all() and torch.allclose(out.sum(-1), torch.ones(4)):
            return False, "these are probabilities: return the filtered logits unchanged (apply no softmax here)"
        kept = torch.isfinite(out)
        kth = logits.topk(k, dim=-1).values[:, -1:]  # (4, 1)
        if k < logits.shape[1] and torch.equal(out, logits.masked_fill(logits < kth, 0.0)):
            return False, "the dropped entries are 0, but a logit of 0 still has probability; use -inf"
        counts = kept.sum(-1)
        if not (counts == k).all():
            return False, f"with k={k} each row must keep exactly {k} logits, yours keeps {counts.tolist()}"
        top = logits.topk(k, dim=-1).indices
        if not kept.gather(-1, top).all():
            return False, f"with k={k} you keep some logits that are not among the {k} largest of their row"
        if not torch.equal(out[kept], logits[kept]):
            return False, "the kept logits must stay unchanged (apply no softmax or scaling here)"
        if (out[~kept] != float("-inf")).any():
            return False, "the dropped entries must be -inf"
    return True, "each row keeps its k largest logits and the rest become -inf"
