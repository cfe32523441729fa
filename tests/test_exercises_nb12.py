"""Notebook 12's checkers: the right answer passes, typical mistakes are rejected with a sentence that names them."""
import pytest
import torch

from attnlib.exercises import check


def combine_right(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    return m, l1 * torch.exp(m1 - safe) + l2 * torch.exp(m2 - safe)


def combine_no_rescale(m1, l1, m2, l2):
    return torch.maximum(m1, m2), l1 + l2


def combine_nan(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def combine_min(m1, l1, m2, l2):
    m = torch.minimum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def test_12_1_accepts_the_rescaled_merge():
    assert check("12.1", combine_right, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (combine_no_rescale, "rescale l1 by exp(m1 - m)"),
    (combine_nan, "NaN"),
    (combine_min, "larger of the two maxima"),
    (42, "expected a function"),
])
def test_12_1_rejects_typical_mistakes(wrong, says):
    verdict = check("12.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def pool_kv(mha, g, consecutive=True, reduce="mean", bias=True, pool_queries=False):
    """The exercise's solution; the keywords switch on the mistakes learners make."""
    from attnlib import MultiHeadAttention

    h, d_k = mha.num_heads, mha.d_k
    gqa = MultiHeadAttention(mha.d_model, h, num_kv_heads=g)
    gqa.w_q.load_state_dict(mha.w_q.state_dict())
    gqa.w_o.load_state_dict(mha.w_o.state_dict())
    for name in ("w_k", "w_v"):
        for part in ("weight", "bias"):
            rows = getattr(getattr(mha, name), part).reshape(h, d_k, -1)  # (h, d_k, d_model or 1)
            groups = rows.reshape(g, h // g, d_k, -1) if consecutive else rows.reshape(h // g, g, d_k, -1).transpose(0, 1)
            pooled = groups.mean(1) if reduce == "mean" else groups.sum(1)
            if part == "weight" or bias:
                getattr(getattr(gqa, name), part).copy_(pooled.reshape(getattr(getattr(gqa, name), part).shape))
    if pool_queries:
        gqa.w_q.weight.mul_(0.5)
    return gqa


def test_12_2_accepts_the_pooled_layer():
    assert check("12.2", pool_kv, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda mha, g: pool_kv(mha, g, consecutive=False), "CONSECUTIVE"),
    (lambda mha, g: pool_kv(mha, g, reduce="sum"), "summed"),
    (lambda mha, g: pool_kv(mha, g, bias=False), "w_k.bias"),
    (lambda mha, g: pool_kv(mha, g, pool_queries=True), "w_q.weight must be mha's"),
    (lambda mha, g: mha, "key/value heads"),
    (lambda mha, g: 4, "expected a MultiHeadAttention"),
])
def test_12_2_rejects_typical_mistakes(wrong, says):
    verdict = check("12.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def window_tiled(q, k, v, window, block_size, skip_before=True, off_by_one=0, skip_shift=0):
    """The exercise's solution; the keywords switch on the mistakes learners make."""
    import math

    L, scale = q.shape[-2], 1 / math.sqrt(q.shape[-1])
    outputs = []
    for qs in range(0, L, block_size):
        qe = min(qs + block_size, L)
        qb = q[..., qs:qe, :] * scale
        m = torch.full((*qb.shape[:-1], 1), float("-inf"))
        l, acc = torch.zeros_like(m), torch.zeros(*qb.shape[:-1], v.shape[-1])
        first = max(0, qs - window + 1 + skip_shift) // block_size * block_size if skip_before else 0
        for ks in range(first, qe, block_size):
            ke = min(ks + block_size, L)
            s = qb @ k[..., ks:ke, :].transpose(-2, -1)
            offset = torch.arange(qs, qe)[:, None] - torch.arange(ks, ke)[None, :]
            s = s.masked_fill((offset < 0) | (offset >= window + off_by_one), float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            safe = torch.where(m_new == float("-inf"), 0.0, m_new)
            p = torch.exp(s - safe)
            l = l * torch.exp(m - safe) + p.sum(-1, keepdim=True)
            acc = acc * torch.exp(m - safe) + p @ v[..., ks:ke, :]
            m = m_new
        outputs.append(acc / l)
    return torch.cat(outputs, dim=-2)


def library_with_window_mask(q, k, v, window, block_size):
    from attnlib import sliding_window_mask, tiled_attention

    return tiled_attention(q, k, v, sliding_window_mask(q.shape[-2], window), causal=True, block_size=block_size)


def test_12_3_accepts_a_window_that_skips_tiles():
    assert check("12.3", window_tiled, quiet=True)
    # one product per query block over the whole window slice: fewer products, also right
    def sliced(q, k, v, window, block_size):
        outs = []
        for qs in range(0, q.shape[-2], block_size):
            qe, ks = min(qs + block_size, q.shape[-2]), max(0, qs - window + 1)
            off = torch.arange(qs, qe)[:, None] - torch.arange(ks, qe)[None, :]
            outs.append(torch.nn.functional.scaled_dot_product_attention(
                q[..., qs:qe, :], k[..., ks:qe, :], v[..., ks:qe, :], attn_mask=(off >= 0) & (off < window)))
        return torch.cat(outs, -2)
    assert check("12.3", sliced, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (library_with_window_mask, "skip the tiles that lie entirely before the window"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_before=False), "skip the tiles that lie entirely before"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, off_by_one=1), "one key too many"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, off_by_one=-1), "one key too few"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_shift=8), "a tile skipped that still held allowed keys"),
    (lambda q, k, v, w, b: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), "differs"),
    (lambda q, k, v, w, b: q[..., :-1, :], "expected an output of shape"),
    (lambda depth, window, n: 3, "takes 3 positional arguments"),
])
def test_12_3_rejects_typical_mistakes(wrong, says):
    verdict = check("12.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_placeholders_are_not_attempted():
    for exercise in ("12.1", "12.2", "12.3"):
        assert check(exercise, None, quiet=True).ok is None


ORDER = torch.arange(16).view(2, 8).T.flatten()  # [0, 8, 1, 9, ...]


def test_12_4_accepts_the_reordering():
    assert check("12.4", ORDER, quiet=True)
    assert check("12.4", ORDER.tolist(), quiet=True)
    assert check("12.4", None, quiet=True).ok is None


@pytest.mark.parametrize("wrong, says", [
    (torch.arange(16), "leaves every dimension"),
    (torch.argsort(ORDER), "inverse permutation"),
    (torch.stack([torch.arange(8) + 8, torch.arange(8)], 1).flatten(), "rotations differ"),  # each pair backwards
    (torch.arange(16).flip(0), "rotations differ"),
    (torch.tensor([0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 7]), "each dimension exactly once"),
    (torch.arange(15), "each dimension exactly once"),
    (torch.stack([torch.arange(8), torch.arange(8) + 8], 1).flatten().float(), "integer indices"),
])
def test_12_4_rejects_typical_mistakes(wrong, says):
    verdict = check("12.4", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message
