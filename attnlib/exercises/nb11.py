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
        return False, "the diagonal is not shifted: new token 0 sits at position 5 and may see the 5 cached tokens (tril(diagonal=5))"
    wrong = (answer != right).nonzero()
    if len(wrong):
        i, j = wrong[0].tolist()
        what = "may see the future key" if j > 5 + i else "is blocked from the earlier key"
        return False, f"new token {i} (position {5 + i}) {what} {j}"
    return True, "new token i sits at position 5 + i and sees keys 0..5 + i"


def _second_copy_loss(model, probe: torch.Tensor, ablate: tuple[int, int] | None = None) -> float:
    """Mean loss on the second half of ``probe (B, 2n)`` (a sequence of n tokens, twice), with one head zeroed."""
    import torch.nn.functional as F
    masks = [torch.ones(attn.num_heads) for attn in model.attns]
    if ablate is not None:
        masks[ablate[0]][ablate[1]] = 0.0
    with torch.no_grad():
        logits = model(probe, head_masks=masks)  # (B, 2n, V)
    n = probe.shape[1] // 2
    return F.cross_entropy(logits[:, n:-1].transpose(1, 2), probe[:, n + 1:]).item()


@checker("11.2")
def head_the_induction_head_needs(answer, model=None, probe=None, threshold: float = 1.0) -> tuple[bool, str]:
    """A pair (0, h): a layer-0 head of notebook 11's attention-only model whose removal (head_masks) lifts the
    loss on the probe's second copy above ``threshold`` nats per token. Every such head is accepted."""
    if model is None or probe is None:
        raise ValueError("call check('11.2', my_head, model=toy_models[0], probe=PROBE)")
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in answer)):
        return False, f"expected a pair (layer, head) of ints such as (0, 1), got {answer!r}"
    layer, head = answer
    heads = [attn.num_heads for attn in model.attns]
    if not 0 <= layer < len(heads) or not 0 <= head < heads[layer]:
        return False, f"there is no head {tuple(answer)}: the model has {len(heads)} layers with {heads} heads"
    if layer != 0:
        return False, ("that is layer 1's head, the induction head itself (section 9); the question is which "
                       "layer-0 head it cannot do without")
    intact = _second_copy_loss(model, probe)
    if intact > threshold:
        return False, (f"this model does not copy yet (second copy {intact:.2f} nats per token with every head): "
                       "pass the trained model of section 9")
    loss = _second_copy_loss(model, probe, (layer, head))
    if loss <= threshold:
        return False, (f"with head (0, {head}) zeroed the second copy still costs {loss:.2f} nats per token "
                       f"(not above {threshold}): copying survives without this head")
    return True, (f"with head (0, {head}) zeroed the second copy costs {loss:.2f} nats per token, against "
                  f"{intact:.2f} intact: the induction head needs it")


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
