"""Online softmax and tiled ("flash") attention: the output of attention without the (Lq, Lk) matrix.

The softmax of a row needs its maximum (for stability) and its sum of exponentials. Both can be
kept *running* while the row arrives block by block: when a new block raises the maximum from
``m`` to ``m'``, everything summed so far is rescaled by ``exp(m - m')``. Attention uses the same
trick for its weighted sum of values, so it can walk over key blocks (and query blocks) and only
ever hold a ``(block, block)`` tile of scores. That is the idea of FlashAttention (Dao et al., 2022).

Written as a Python loop, as here, it saves memory but not time: every tile is a separate
PyTorch call. A fused kernel runs the same loop inside one call, with the tile in fast memory.
"""
from __future__ import annotations

import math

import torch

from ._checks import check_attention_mask, check_qkv, check_tensor, shape_of


def _check_block_size(block_size: object) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")


def online_softmax_stats(x: torch.Tensor, block_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over the last dimension in blocks: the row maximum ``m`` and ``l = sum(exp(x - m))``.

    Args:
        x: scores, shape ``(..., n)``; ``-inf`` entries are allowed.
        block_size: how many entries of each row are read at a time.

    Returns:
        ``(m, l)``, each of shape ``(..., 1)``. A row that is all ``-inf`` gets ``m = -inf``, ``l = 0``.
    """
    check_tensor("x", x, min_dim=1)
    _check_block_size(block_size)
    m = torch.full((*x.shape[:-1], 1), float("-inf"), dtype=x.dtype, device=x.device)  # (..., 1)
    l = torch.zeros_like(m)  # (..., 1)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]  # (..., b)
        m_new = torch.maximum(m, block.amax(dim=-1, keepdim=True))
        safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # exp(-inf - (-inf)) would be NaN
        l = l * torch.exp(m - safe) + torch.exp(block - safe).sum(dim=-1, keepdim=True)
        m = m_new
    return m, l


def online_softmax(x: torch.Tensor, block_size: int = 64) -> torch.Tensor:
    """``torch.softmax(x, dim=-1)`` from the block-wise statistics of :func:`online_softmax_stats`.

    Rows with some ``-inf`` entries match ``torch.softmax``; a row that is *all* ``-inf`` gives
    zeros (``torch.softmax`` gives NaN there), the convention of the rest of attnlib.
    """
    m, l = online_softmax_stats(x, block_size)
    safe_m = torch.where(m == float("-inf"), 0.0, m)
    safe_l = torch.where(l > 0, l, 1.0)
    return torch.exp(x - safe_m) / safe_l  # (..., n)


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    block_size: int = 64,
) -> torch.Tensor:
    """The output of ``scaled_dot_product_attention(q, k, v, mask)``, computed tile by tile.

    Args:
        q: queries ``(..., Lq, d_k)``.
        k: keys ``(..., Lk, d_k)``.
        v: values ``(..., Lk, d_v)``.
        mask: optional bool mask broadcasting to ``(..., Lq, Lk)``; True = may attend.
        causal: if True, query i may only see keys j <= i (aligned top-left, as
            ``F.scaled_dot_product_attention(is_causal=True)``); combined with ``mask`` by AND.
        block_size: rows of queries and of keys per tile; any length works, the last tile is shorter.

    Returns:
        ``(..., Lq, d_v)``. A query with no allowed key gets a zero output. Only ``(block, block)``
        tiles of scores exist at any time, so extra memory grows like ``Lq`` instead of ``Lq * Lk``.
    """
    check_tensor("q", q, min_dim=2)
    check_tensor("k", k, min_dim=2)
    check_tensor("v", v, min_dim=2)
    _check_block_size(block_size)
    batch = check_qkv(q, k, v)  # the broadcast batch dimensions of q, k and v
    Lq, Lk = q.shape[-2], k.shape[-2]
    if mask is not None:
        names = tuple(f"n{i}" for i in range(len(batch)))
        check_attention_mask(mask, (*batch, Lq, Lk), (*names, "Lq", "Lk"))  # (Lq, Lk) or full rank, as in attention.py
        mask = mask.expand(torch.broadcast_shapes(mask.shape, (Lq, Lk)))  # a view: no copy

    scale = 1.0 / math.sqrt(q.shape[-1])
    blocks = []
    for qs in range(0, Lq, block_size):
        qe = min(qs + block_size, Lq)
        q_blk = q[..., qs:qe, :] * scale  # (..., bq, d_k)
        m = torch.full((*batch, qe - qs, 1), float("-inf"), dtype=q.dtype, device=q.device)  # running max
        l = torch.zeros_like(m)  # running sum of exp(score - m)
        acc = torch.zeros((*batch, qe - qs, v.shape[-1]), dtype=v.dtype, device=v.device)  # running sum of exp * v
        for ks in range(0, Lk, block_size):
            if causal and ks > qe - 1:  # every key of this tile is in the future of every query
                break
            ke = min(ks + block_size, Lk)
            scores = q_blk @ k[..., ks:ke, :].transpose(-2, -1)  # (..., bq, bk)
            allowed = None
            if causal:
                allowed = torch.arange(qs, qe, device=q.device)[:, None] >= torch.arange(ks, ke, device=q.device)
            if mask is not None:
                tile = mask[..., qs:qe, ks:ke]
                allowed = tile if allowed is None else tile & allowed
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing allowed yet
            correction = torch.exp(m - safe)  # rescales what was summed under the old maximum
            p = torch.exp(scores - safe)  # (..., bq, bk); exactly 0 where masked
            l = l * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ v[..., ks:ke, :]  # (..., bq, d_v)
            m = m_new
        blocks.append(acc / torch.where(l > 0, l, 1.0))  # a row with no allowed key stays 0
    return torch.cat(blocks, dim=-2)  # (..., Lq, d_v)
