"""Checkers for notebook 11's exercises (a small GPT with a KV cache)."""
from __future__ import annotations

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


def _copy_losses(model, probe: torch.Tensor, ablate: tuple[int, int] | None = None) -> tuple[float, float]:
    """Mean losses on the first and second copy of ``probe (B, 2n)`` (n distinct tokens, twice), with one head
    zeroed: first = predicting tokens 1..n-1, second = predicting tokens n+1..2n-1."""
    import torch.nn.functional as F
    masks = [torch.ones(attn.num_heads) for attn in model.attns]
    if ablate is not None:
        masks[ablate[0]][ablate[1]] = 0.0
    with torch.no_grad():
        logits = model(probe, head_masks=masks)  # (B, 2n, V)
    n = probe.shape[1] // 2
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), probe[:, 1:], reduction="none")  # (B, 2n - 1)
    return loss[:, : n - 1].mean().item(), loss[:, n:].mean().item()


@checker("11.2")
def ablation_table(answer, models=None, probe=None, tol: float = 1e-3) -> tuple[bool, str]:
    """A function ``my_ablation(model) -> {(layer, head): gap}``: for every head of notebook 11's attention-only
    model, the gap first-copy loss minus second-copy loss on ``probe`` with that head alone zeroed (head_masks).
    Compared with the checker's own measurement on each of ``models`` (at least two, so that a table computed
    once for one model, or typed in, does not pass)."""
    if models is None or probe is None:
        raise ValueError("call check('11.2', my_ablation, models=toy_models[:2], probe=PROBE)")
    require(callable_problem(answer, "a function my_ablation(model)"))
    tables = []
    for i, model in enumerate(models):
        first, second = _copy_losses(model, probe)
        if first - second < 1.0:
            return False, (f"model {i} does not copy yet (gap {first - second:.2f} nats with every head): "
                           "pass the trained models of section 9")
        got = answer(model)
        if not isinstance(got, dict):
            return False, f"expected a dict {{(layer, head): gap}}, got {type(got).__name__}"
        heads = [(layer, h) for layer, attn in enumerate(model.attns) for h in range(attn.num_heads)]
        keys = list(got)
        if not all(isinstance(k, tuple) and len(k) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                for x in k) for k in keys):
            return False, f"the keys must be (layer, head) pairs of ints such as (0, 1), got {keys[:3]}"
        if sorted(keys) != heads:
            return False, (f"the table must have one entry per head of every layer, {len(heads)} in all "
                           f"(the model has {[a.num_heads for a in model.attns]} heads per layer); yours has "
                           f"{sorted(keys)}")
        try:
            values = {k: float(v) for k, v in got.items()}
        except (TypeError, ValueError):
            return False, "each value must be a number: the gap in nats per token"
        truth = {k: _copy_losses(model, probe, k) for k in heads}  # (first, second) with head k zeroed
        wrong = [k for k in heads if abs(values[k] - (truth[k][0] - truth[k][1])) > tol]
        if wrong and tables and values == tables[0]:
            return False, "your function gives the same table for two different models: measure the model it is given"
        for k in wrong:
            f, s = truth[k]
            if abs(values[k] - (s - f)) <= tol:
                return False, f"the sign is reversed at head {k}: the gap is first-copy loss minus second-copy loss"
            if abs(values[k] - s) <= tol:
                return False, f"at head {k} this is the second-copy loss alone; the gap subtracts it from the first-copy loss"
            if abs(values[k] - f) <= tol:
                return False, f"at head {k} this is the first-copy loss alone; the gap subtracts the second-copy loss from it"
            return False, (f"model {i}, head {k}: your gap differs from the one measured with that head alone zeroed "
                           f"(every other head kept at 1) by more than {tol} nats")
        tables.append(values)
    return True, (f"the gaps match on all {len(models)} models: for each head, how much copying survives "
                  "when it alone is removed")


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
