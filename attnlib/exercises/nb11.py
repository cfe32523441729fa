"""Checkers for notebook 11's exercises (a small GPT with a KV cache)."""
from __future__ import annotations

import torch

from . import checker


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


def _counted(V: int, T: int, d: int, h: int, layers: int, d_ff: int) -> int:
    from ..gpt import GPT, GPTConfig
    return sum(p.numel() for p in GPT(GPTConfig(V, T, d, h, layers, d_ff)).parameters())


@checker("11.2")
def parameter_formula(answer) -> tuple[bool, str]:
    """A function (V, max_len, d, layers, d_ff) -> the parameter count of attnlib.gpt.GPT."""
    if not callable(answer):
        return False, f"expected a function my_params(V, max_len, d, layers, d_ff), got {type(answer).__name__}"
    for V, T, d, h, layers, d_ff in ((103, 64, 48, 4, 2, 192), (50, 16, 8, 2, 3, 40), (7, 9, 12, 3, 1, 5)):
        want, got = _counted(V, T, d, h, layers, d_ff), answer(V, T, d, layers, d_ff)
        if got == want:
            continue
        if got == want + V * d:
            return False, f"for V={V}, d={d} you count the output layer separately; it is tied to the token embedding"
        if got == want - T * d:
            return False, "the learned position embedding (max_len x d) is missing"
        if got == want - 2 * d:
            return False, "the final LayerNorm (2 d) is missing"
        return False, (f"for V={V}, max_len={T}, d={d}, layers={layers}, d_ff={d_ff} the model has {want:,} "
                       f"parameters, your function says {got!r}")
    return True, "your formula matches the counted parameters of three different models"


@checker("11.3")
def top_k_filter(answer) -> tuple[bool, str]:
    """A function (logits (B, V), k) -> logits with all but the k largest of each row set to -inf."""
    if not callable(answer):
        return False, f"expected a function my_top_k(logits, k), got {type(answer).__name__}"
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
