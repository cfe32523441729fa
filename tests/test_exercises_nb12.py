"""Notebook 12's checkers: the right answer passes, typical mistakes are rejected with a sentence that names them."""
import pytest
import torch

from attnlib.exercises import check


def merge_right(m1, l1, acc1, m2, l2, acc2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = l1 * a1 + l2 * a2
    return (acc1 * a1 + acc2 * a2) / torch.where(l == 0, 1.0, l)


def merge_normalised_first(m1, l1, acc1, m2, l2, acc2):  # each half's output, weighted by its share: also right
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    w1, w2 = l1 * torch.exp(m1 - safe), l2 * torch.exp(m2 - safe)
    o1, o2 = torch.nan_to_num(acc1 / l1), torch.nan_to_num(acc2 / l2)
    return torch.nan_to_num((o1 * w1 + o2 * w2) / (w1 + w2))


def merge_no_rescale(m1, l1, acc1, m2, l2, acc2):
    return torch.nan_to_num((acc1 + acc2) / (l1 + l2))


def merge_average(m1, l1, acc1, m2, l2, acc2):
    return torch.nan_to_num((acc1 / l1 + acc2 / l2) / 2)


def merge_nan(m1, l1, acc1, m2, l2, acc2):
    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)
    return (acc1 * a1 + acc2 * a2) / (l1 * a1 + l2 * a2)


def merge_empty_row_nan(m1, l1, acc1, m2, l2, acc2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    return (acc1 * a1 + acc2 * a2) / (l1 * a1 + l2 * a2)


def merge_unnormalised(m1, l1, acc1, m2, l2, acc2):
    m = torch.maximum(m1, m2)
    safe = torch.where(m == float("-inf"), 0.0, m)
    return acc1 * torch.exp(m1 - safe) + acc2 * torch.exp(m2 - safe)


def merge_first_as_reference(m1, l1, acc1, m2, l2, acc2):  # unstable: exp(m2 - m1) overflows when m2 >> m1
    safe = torch.where(m1 == float("-inf"), m2, m1)
    safe = torch.where(safe == float("-inf"), 0.0, safe)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = l1 * a1 + l2 * a2
    return (acc1 * a1 + acc2 * a2) / torch.where(l == 0, 1.0, l)


def merge_smaller_maximum(m1, l1, acc1, m2, l2, acc2):  # unstable: the smaller maximum as the reference
    both = torch.minimum(m1, m2)
    safe = torch.where(both == float("-inf"), torch.maximum(m1, m2), both)
    safe = torch.where(safe == float("-inf"), 0.0, safe)
    a1, a2 = torch.exp(m1 - safe), torch.exp(m2 - safe)
    l = l1 * a1 + l2 * a2
    return (acc1 * a1 + acc2 * a2) / torch.where(l == 0, 1.0, l)


def test_12_1_accepts_the_merge():
    assert check("12.1", merge_right, quiet=True)
    assert check("12.1", merge_normalised_first, quiet=True)


def test_12_1_accepts_a_merge_in_float64():
    """A right merge computed in float64 is right: it is compared in the inputs' dtype, not refused with an error."""
    assert check("12.1", lambda *stats: merge_right(*(t.double() for t in stats)), quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (merge_no_rescale, "its own maximum"),
    (merge_average, "equal weight"),
    (merge_nan, "give zeros there"),
    (merge_empty_row_nan, "give zeros there"),
    (merge_unnormalised, "differs from attention over all twelve keys"),
    (merge_first_as_reference, "overflows"),
    (merge_smaller_maximum, "overflows"),
    (lambda m1, l1, acc1, m2, l2, acc2: (m1, l1), "expected the attention output"),
    (42, "expected a function"),
])
def test_12_1_rejects_typical_mistakes(wrong, says):
    verdict = check("12.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


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


def window_tiled(q, k, v, window, block_size, skip_before=True, off_by_one=0, skip_shift=0, skip_future=True):
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
        for ks in range(first, qe if skip_future else L, block_size):
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


def test_12_3_accepts_a_window_in_float64():
    """The same tiles computed in float64: the output is compared in q's dtype, not refused with an error."""
    def in_float64(q, k, v, window, block_size):
        return window_tiled(q.double(), k.double(), v.double(), window, block_size)
    assert check("12.3", in_float64, quiet=True)


def two_passes(q, k, v, window, block_size):
    """Only the tiles that hold an allowed key, but two passes over them: the maximum first, then the sum and the
    weighted values, so every score is computed twice (the work of about 69 tiles where 45 are needed)."""
    import math

    L, b, scale, outs = q.shape[-2], block_size, 1 / math.sqrt(q.shape[-1]), []
    for qs in range(0, L, b):
        qe = min(qs + b, L)
        qb, tiles = q[..., qs:qe, :] * scale, range(max(0, qs - window + 1) // b * b, qe, b)

        def scores(ks):
            ke = min(ks + b, L)
            off = torch.arange(qs, qe)[:, None] - torch.arange(ks, ke)[None, :]
            return (qb @ k[..., ks:ke, :].transpose(-2, -1)).masked_fill((off < 0) | (off >= window), float("-inf"))
        m = torch.stack([scores(ks).amax(-1) for ks in tiles]).amax(0)[..., None]  # first pass: the maximum
        l, acc = 0, 0
        for ks in tiles:  # second pass: the same scores again
            p = torch.exp(scores(ks) - m)
            l, acc = l + p.sum(-1, keepdim=True), acc + p @ v[..., ks:min(ks + b, L), :]
        outs.append(acc / l)
    return torch.cat(outs, -2)


def window_mask(L, window):
    offset = torch.arange(L)[:, None] - torch.arange(L)[None, :]
    return (offset >= 0) & (offset < window)


def dense_teaching(q, k, v, window, block_size):  # notebook 04's attention with notebook 12's window mask
    from attnlib.attention import scaled_dot_product_attention

    return scaled_dot_product_attention(q, k, v, window_mask(q.shape[-2], window))[0]


def dense_fused(q, k, v, window, block_size):  # PyTorch's kernel: no (L, L) tensor in Python, all the work
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(q.shape[-2], window))


def dense_broadcast(q, k, v, window, block_size):  # scores without a matrix product
    scores = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~window_mask(q.shape[-2], window), float("-inf"))
    return scores.softmax(-1) @ v


def all_tiles_in_one_product(q, k, v, window, block_size):  # tiled bookkeeping, but every tile computed at once
    L, b = q.shape[-2], block_size
    pad = -L % b
    kp = torch.nn.functional.pad(k, (0, 0, 0, pad)).unflatten(-2, (-1, b))  # (..., tiles, b, d)
    scores = torch.einsum("...qd,...tkd->...qtk", q, kp).flatten(-2)[..., :L] / q.shape[-1] ** 0.5
    return scores.masked_fill(~window_mask(L, window), float("-inf")).softmax(-1) @ v


def causal_tiles_by_hand(q, k, v, window, block_size):
    """Every causal tile (none skipped before the window), scores as summed elementwise products: the work the
    check counts is only that of matrix products, so this must be refused by the lower bound."""
    L, b, outs = q.shape[-2], block_size, []
    for qs in range(0, L, b):
        qe = min(qs + b, L)
        tiles = range(0, qe, b)  # every causal key tile
        scores = torch.cat([(q[..., qs:qe, None, :] * k[..., None, ks:min(ks + b, qe), :]).sum(-1) for ks in tiles], -1)
        off = torch.arange(qs, qe)[:, None] - torch.arange(qe)[None, :]
        w = (scores / q.shape[-1] ** 0.5).masked_fill(~((off >= 0) & (off < window)), float("-inf")).softmax(-1)
        outs.append(sum((w[..., ks:min(ks + b, qe), None] * v[..., None, ks:min(ks + b, qe), :]).sum(-2) for ks in tiles))
    return torch.cat(outs, -2)


def half_by_hand(q, k, v, window, block_size):
    """Scores of every causal tile by elementwise products, then weights @ values as a matrix product over the
    window's tiles only: a count of matrix products alone saw 'the work of 22 tiles where 45 hold allowed keys'."""
    L, b, outs = q.shape[-2], block_size, []
    for qs in range(0, L, b):
        qe = min(qs + b, L)
        scores = torch.cat([(q[..., qs:qe, None, :] * k[..., None, ks:min(ks + b, qe), :]).sum(-1)
                            for ks in range(0, qe, b)], -1)
        off = torch.arange(qs, qe)[:, None] - torch.arange(qe)[None, :]
        w = (scores / q.shape[-1] ** 0.5).masked_fill(~((off >= 0) & (off < window)), float("-inf")).softmax(-1)
        first = max(0, qs - window + 1) // b * b
        outs.append(w[..., first:] @ v[..., first:qe, :])
    return torch.cat(outs, -2)


def rows_by_hand(q, k, v, window, block_size):
    L, outs = q.shape[-2], []
    for i in range(L):
        scores = (q[..., i:i + 1, :] * k[..., :i + 1, :]).sum(-1) / q.shape[-1] ** 0.5  # (..., i + 1)
        scores[..., : max(0, i - window + 1)] = float("-inf")
        outs.append((scores.softmax(-1)[..., None] * v[..., :i + 1, :]).sum(-2, keepdim=True))
    return torch.cat(outs, -2)


@pytest.mark.parametrize("wrong, says", [
    (dense_teaching, "dense attention"),
    (dense_fused, "tiles in the future too, or dense attention"),  # the fused kernel: all 256 tiles
    (dense_broadcast, "dense attention"),
    (all_tiles_in_one_product, "dense attention"),
    (library_with_window_mask, "skip the tiles that lie entirely before the window"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_before=False), "skip the tiles that lie entirely before"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_before=False, skip_future=False),
     "tiles in the future too"),  # no tile skipped at all
    (two_passes, "compute each score once"),  # only the needed tiles, but each one's scores computed twice
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, off_by_one=1), "one key too many"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, off_by_one=-1), "one key too few"),
    (lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_shift=8), "a tile skipped that still held allowed keys"),
    (lambda q, k, v, w, b: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), "differs"),
    (lambda q, k, v, w, b: q[..., :-1, :], "expected an output of shape"),
    (causal_tiles_by_hand, "skip the tiles that lie entirely before"),  # every causal tile, scores by hand
    (half_by_hand, "skip the tiles that lie entirely before"),  # scores by hand for every causal tile, products for the rest
    (rows_by_hand, "skip the tiles that lie entirely before"),  # row by row over all causal keys, no tiles at all
    (lambda depth, window, n: 3, "takes 3 positional arguments"),
])
def test_12_3_rejects_typical_mistakes(wrong, says):
    verdict = check("12.3", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_placeholders_are_not_attempted():
    for exercise in ("12.1", "12.2", "12.3", "12.4"):
        assert check(exercise, None, quiet=True).ok is None


def to_interleaved(mha, order="right", convert=("w_q", "w_k"), heads_of_k=None, bias=True, rotary="interleaved",
                   base=None, also_values=False, in_place=False):
    """The exercise's solution; the keywords switch on the mistakes learners make."""
    import copy

    from attnlib import RotaryEmbedding

    d_k, half = mha.d_k, mha.d_k // 2
    new = mha if in_place else copy.deepcopy(mha)
    rope = {"interleaved": RotaryEmbedding(d_k, mha.rotary.base if base is None else base),
            "half": RotaryEmbedding(d_k, mha.rotary.base, interleaved=False), "none": None}[rotary]
    new.rotary = rope
    for name in convert + (("w_v",) if also_values else ()):
        heads = {"w_q": mha.num_heads, "w_k": heads_of_k or mha.num_kv_heads, "w_v": mha.num_kv_heads}[name]
        size = getattr(mha, name).weight.shape[0] // heads  # rows per head (d_k, unless heads_of_k is wrong)
        right = torch.arange(size).view(2, size // 2).T.flatten()  # interleaved j <- rotate-half right[j]
        within = {"right": right, "backwards": torch.argsort(right), "swapped": right.view(-1, 2).flip(1).flatten(),
                  "whole": None}[order]
        if within is None:  # the whole matrix treated as one head
            rows = torch.arange(heads * size).view(2, -1).T.flatten()
        else:
            rows = torch.cat([head * size + within for head in range(heads)])
        lin = getattr(new, name)
        with torch.no_grad():
            lin.weight.copy_(lin.weight[rows].clone())
            if bias:
                lin.bias.copy_(lin.bias[rows].clone())
    return new


def test_12_4_accepts_the_converted_layer():
    assert check("12.4", to_interleaved, quiet=True)


def test_12_4_accepts_a_pair_turned_with_its_signs():
    """(i + d/2, -i) in place of (i, i + d/2) is the same pair turned by a quarter: every score is the same."""
    def quarter_turned(mha):
        new = to_interleaved(mha)
        with torch.no_grad():
            for lin in (new.w_q, new.w_k):
                for part in (lin.weight, lin.bias):
                    pairs = part.view(-1, 2, *part.shape[1:]).clone()
                    part.copy_(torch.stack([pairs[:, 1], -pairs[:, 0]], 1).reshape(part.shape))
        return new
    assert check("12.4", quarter_turned, quiet=True)


def turned(mha, turn_q=0, turn_k=0):
    """The right conversion, then every pair of w_q (and of w_k) turned by a multiple of a quarter turn: (a, b) ->
    (-b, a) per quarter. Rows move and change sign, weights and biases alike."""
    new = to_interleaved(mha)
    with torch.no_grad():
        for lin, quarters in ((new.w_q, turn_q), (new.w_k, turn_k)):
            for part in (lin.weight, lin.bias):
                pairs = part.view(-1, 2, *part.shape[1:]).clone()
                for _ in range(quarters % 4):
                    pairs = torch.stack([-pairs[:, 1], pairs[:, 0]], 1)
                part.copy_(pairs.reshape(part.shape))
    return new


def test_12_4_accepts_a_half_turn_of_queries_and_keys():
    """(-a, -b) in both w_q and w_k: every score is the same."""
    assert check("12.4", lambda mha: turned(mha, 2, 2), quiet=True)


def by_source(mha, source_of, sign_of=lambda j: 1):
    """w_q and w_k rebuilt from a per-head source list: new row j of each head is sign_of(j) * mha's row source_of(j)
    of that head (biases alike); the mistakes below are lists a learner can write."""
    import copy

    from attnlib import RotaryEmbedding

    d_k = mha.d_k
    new = copy.deepcopy(mha)
    new.rotary = RotaryEmbedding(d_k, mha.rotary.base)
    source = torch.tensor([source_of(j, d_k // 2) for j in range(d_k)])
    sign = torch.tensor([float(sign_of(j)) for j in range(d_k)])
    with torch.no_grad():
        for lin, heads in ((new.w_q, mha.num_heads), (new.w_k, mha.num_kv_heads)):
            rows = (torch.arange(heads)[:, None] * d_k + source).flatten()
            lin.weight.copy_(lin.weight[rows] * sign.repeat(heads)[:, None])
            lin.bias.copy_(lin.bias[rows] * sign.repeat(heads))
    return new


def with_permute_rope_rows(mha):
    from attnlib.gguf_io import permute_rope_rows

    new = to_interleaved(mha, convert=())
    with torch.no_grad():
        for name, heads in (("w_q", mha.num_heads), ("w_k", mha.num_kv_heads)):
            getattr(new, name).weight.copy_(permute_rope_rows(getattr(mha, name).weight, heads))
            getattr(new, name).bias.copy_(permute_rope_rows(getattr(mha, name).bias, heads))
    return new


@pytest.mark.parametrize("wrong, says", [
    (lambda mha: to_interleaved(mha, convert=()), "where they were in mha"),
    (lambda mha: to_interleaved(mha, convert=("w_q",)), "new w_k are where they were"),
    (lambda mha: to_interleaved(mha, order="backwards"), "turns at frequency"),
    (lambda mha: to_interleaved(mha, order="swapped"), "wrong order"),
    (lambda mha: to_interleaved(mha, order="whole"), "rows stay inside their head"),
    (lambda mha: to_interleaved(mha, heads_of_k=mha.num_heads), "turns at frequency"),  # w_k cut into h heads
    (lambda mha: to_interleaved(mha, bias=False), "bias did not move"),
    (lambda mha: to_interleaved(mha, rotary="half"), "must rotate adjacent pairs"),
    (lambda mha: to_interleaved(mha, rotary="none"), "must rotate adjacent pairs"),
    (lambda mha: to_interleaved(mha, rotary="none"), "RotaryEmbedding(d_k, mha.rotary.base)"),  # base included
    # a row copied, not moved: source[1::2] = arange(half) (the + half forgotten), and row i + half twice
    (lambda mha: by_source(mha, lambda j, half: j // 2), "is used twice and row"),
    (lambda mha: by_source(mha, lambda j, half: j // 2 + half), "is used twice and row"),
    # one row of every pair negated, as in Hugging Face's rotate_half (-x2, x1): (a, -b), then (-a, b)
    (lambda mha: by_source(mha, lambda j, half: j // 2 + half * (j % 2), lambda j: -1 if j % 2 else 1), "is negated"),
    (lambda mha: by_source(mha, lambda j, half: j // 2 + half * (j % 2), lambda j: 1 if j % 2 else -1), "is negated"),
    # a quarter turn of the queries' pairs only, then of the keys' only, then opposite quarter turns of both
    (lambda mha: turned(mha, 1, 0), "by the same amount"),
    (lambda mha: turned(mha, 0, 1), "by the same amount"),
    (lambda mha: turned(mha, 1, 3), "by the same amount"),
    (lambda mha: turned(mha, 2, 0), "by the same amount"),
    (lambda mha: to_interleaved(mha, base=10000.0), "keep mha's frequencies"),  # the default base, not mha's
    (lambda mha: to_interleaved(mha, also_values=True), "w_v and w_o"),
    (lambda mha: to_interleaved(mha, in_place=True), "original layer changed"),
    (with_permute_rope_rows, "permute_rope_rows"),
    (lambda mha: mha.w_q, "expected a MultiHeadAttention"),
    (42, "expected a function"),
])
def test_12_4_rejects_typical_mistakes(wrong, says):
    verdict = check("12.4", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message, verdict.message
    for right in ("[0, 8, 1, 9", "[0, 2, 4", "i + d/2", "i + d_k/2"):  # never the answer itself
        assert right not in verdict.message, verdict.message


@pytest.mark.parametrize("wrong", [
    two_passes,
    dense_fused,
    lambda q, k, v, w, b: window_tiled(q, k, v, w, b, skip_before=False, skip_future=False),
])
def test_12_3_names_no_false_cause(wrong):
    """Too much work that does not come from the tiles before the window is not blamed on them."""
    verdict = check("12.3", wrong, quiet=True)
    assert verdict.ok is False and "before the window" not in verdict.message, verdict.message
