"""Multi-head attention: h small attentions side by side, then one output projection."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_attention_mask, check_key_padding_mask, check_tensor, shape_of
from .attention import scaled_dot_product_attention


def combine_masks(mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """One attention mask from an ``(Lq, Lk)`` or ``(B, h, Lq, Lk)`` mask and a ``(B, Lk)`` padding mask.

    A key may be attended to only where both allow it (True = may attend / real token).
    Returns None, a 2-D mask, or a 4-D mask that broadcasts to ``(B, h, Lq, Lk)``.
    """
    if key_padding_mask is None:
        return mask
    keys = key_padding_mask[:, None, None, :]  # (B, 1, 1, Lk)
    return keys if mask is None else keys & mask  # (B, 1 or h, Lq or 1, Lk)


@torch.no_grad()
def copy_checked(ours: nn.Module, copy: Callable[[], None], run_ours: Callable[[torch.Tensor], torch.Tensor],
                 run_theirs: Callable[[torch.Tensor], torch.Tensor], probe: torch.Tensor, what: str) -> None:
    """Run ``copy()``, then compare both modules' outputs on ``probe`` (in eval mode, no dropout).

    Copying weights can succeed while the two modules compute different things (a setting
    attnlib does not reproduce); then the copy is undone and a ValueError names the gap.
    """
    saved = {k: v.clone() for k, v in ours.state_dict().items()}
    copy()
    mine, theirs = run_ours(probe), run_theirs(probe)
    gap = (mine - theirs).abs().max().item() if mine.shape == theirs.shape else float("inf")
    if not gap <= 1e-4 * max(1.0, theirs.abs().max().item()):
        ours.load_state_dict(saved)
        raise ValueError(
            f"after copying, this module and the {what} give different outputs on a probe input "
            f"(largest difference {gap:.2e}); it has a setting attnlib does not reproduce, so nothing was copied"
        )


class _Eval:
    """Put modules in eval mode for a block, then restore each one's mode."""

    def __init__(self, *modules: nn.Module):
        self.modules = modules

    def __enter__(self):
        self.modes = [m.training for m in self.modules]
        for m in self.modules:
            m.eval()

    def __exit__(self, *exc):
        for m, mode in zip(self.modules, self.modes):
            m.train(mode)


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, dropout_p: float = 0.0
) -> torch.Tensor:
    """The output of ``scaled_dot_product_attention`` (no weights) from PyTorch's fused kernel.

    Same shapes and mask convention (bool, True = may attend); the ``(Lq, Lk)`` weight
    matrix is never stored, so memory stays O(L) instead of O(L^2). Used by
    ``MultiHeadAttention(..., need_weights=False)``; inputs are not re-checked here.
    """
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    row_has_key = mask.any(dim=-1, keepdim=True)
    if row_has_key.all():  # the usual case (causal, padding): every query has a key
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    # Some PyTorch versions return NaN for a query with no allowed key; let such rows
    # see every key, then zero them, to match the teaching version.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~row_has_key, dropout_p=dropout_p)
    return out.masked_fill(~row_has_key, 0.0)


class MultiHeadAttention(nn.Module):
    """Batch-first multi-head attention with separate ``w_q, w_k, w_v, w_o`` projections.

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: number of heads h; each head works in ``d_k = d_model // h`` dimensions.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have a bias.

    ``forward(query (B, Lq, d_model), key (B, Lk, d_model), value (B, Lk, d_model),
    mask=None, need_weights=True, key_padding_mask=None)`` returns
    ``(out (B, Lq, d_model), weights)`` where ``weights`` is ``(B, h, Lq, Lk)``, or None
    when ``need_weights=False``. Masks are bool, True = may attend:

    * ``mask``: ``(Lq, Lk)`` (e.g. ``causal_mask(L)``), shared by the batch and the heads,
      or 4-D ``(B, h, Lq, Lk)`` with size 1 where shared. A 3-D or 1-D mask is refused:
      broadcasting would read ``(B, Lq, Lk)`` as ``(h, Lq, Lk)``.
    * ``key_padding_mask``: ``(B, Lk)``, True = a real token (``padding_mask(lengths, Lk)``).
      It has its own argument because a 2-D ``mask`` always means ``(Lq, Lk)``, and a
      ``(B, Lk)`` padding mask cannot be told from one by its shape when ``B == Lq``.

    Both may be given; a key is attended to only where both allow it.

    ``need_weights`` follows ``nn.MultiheadAttention``: an attention module always returns
    ``(out, weights)``, and ``need_weights=False`` makes ``weights`` None and sends the heads
    through PyTorch's fused ``F.scaled_dot_product_attention`` (same output, much less
    memory). The blocks and models built on it (TransformerBlock, TransformerEncoder,
    TransformerTagger) instead return only their output unless ``return_attention=True``.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads} "
                f"(d_model % num_heads = {d_model % num_heads if num_heads > 0 else 'undefined'})"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout_p = dropout
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, d_model) -> (B, h, L, d_k)."""
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, L, d_k)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h, L, d_k) -> (B, L, d_model). Transpose back *before* flattening the heads."""
        B, h, L, d_k = x.shape
        return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, d_model)

    def _check_inputs(self, query, key, value, mask, key_padding_mask):
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3)
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} has shape {shape_of(x)} but its last dimension must be d_model={self.d_model}"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key has shape {shape_of(key)} but value has shape {shape_of(value)}; "
                "batch size and length must match"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query has shape {shape_of(query)} but key has shape {shape_of(key)}; the batch sizes must match"
            )
        if mask is not None:
            target = (query.shape[0], self.num_heads, query.shape[1], key.shape[1])
            check_attention_mask(mask, target, ("B", "h", "Lq", "Lk"), padding_arg="key_padding_mask")
        if key_padding_mask is not None:
            check_key_padding_mask(key_padding_mask, key.shape[0], key.shape[1])

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        key_padding_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` over ``key``/``value``; see the class docstring for shapes and masks."""
        self._check_inputs(query, key, value, mask, key_padding_mask)
        mask = combine_masks(mask, key_padding_mask)  # (Lq, Lk) or (B, h|1, Lq|1, Lk), or None
        q = self.split_heads(self.w_q(query))  # (B, h, Lq, d_k)
        k = self.split_heads(self.w_k(key))  # (B, h, Lk, d_k)
        v = self.split_heads(self.w_v(value))  # (B, h, Lk, d_k)
        p = self.dropout_p if self.training else 0.0

        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        else:
            heads, weights = fused_attention(q, k, v, mask, dropout_p=p), None
        return self.w_o(self.merge_heads(heads)), weights  # (B, Lq, d_model)

    @torch.no_grad()
    def copy_from_torch(self, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of an ``nn.MultiheadAttention`` of the same size into this module.

        Then both run on a probe input (eval mode); if their outputs differ, the copy is
        undone and a ValueError is raised. The source may be batch-first or not.
        """
        self._check_copyable(mha)

        def copy():
            wq, wk, wv = mha.in_proj_weight.chunk(3)
            for lin, w in ((self.w_q, wq), (self.w_k, wk), (self.w_v, wv)):
                lin.weight.copy_(w)
            self.w_o.weight.copy_(mha.out_proj.weight)
            if self.w_q.bias is not None:  # _check_copyable made sure both or neither have biases
                bq, bk, bv = mha.in_proj_bias.chunk(3)
                for lin, b in ((self.w_q, bq), (self.w_k, bk), (self.w_v, bv)):
                    lin.bias.copy_(b)
                self.w_o.bias.copy_(mha.out_proj.bias)

        def run_theirs(x):
            x = x if mha.batch_first else x.transpose(0, 1)  # (L, B, d) when not batch-first
            out = mha(x, x, x, need_weights=False)[0]
            return out if mha.batch_first else out.transpose(0, 1)

        weight = mha.in_proj_weight
        probe = torch.randn(2, 5, self.d_model, generator=torch.Generator().manual_seed(0))  # never the global RNG
        with _Eval(self, mha):
            mine = self.w_q.weight
            copy_checked(self, copy, lambda x: self(*(x.to(mine),) * 3)[0].to(x), run_theirs,
                         probe.to(weight), "nn.MultiheadAttention")
        return self

    def _check_copyable(self, mha: nn.MultiheadAttention) -> None:
        """Raise ValueError if ``mha``'s size or kind is one this module cannot reproduce."""
        if mha.embed_dim != self.d_model or mha.num_heads != self.num_heads:
            raise ValueError(
                f"nn.MultiheadAttention has embed_dim={mha.embed_dim}, num_heads={mha.num_heads}; "
                f"expected d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if mha.in_proj_weight is None:
            raise ValueError("nn.MultiheadAttention with separate kdim/vdim is not supported")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
        theirs, ours = mha.in_proj_bias is not None, self.w_q.bias is not None
        if theirs != ours:  # copying would succeed but the outputs would differ
            raise ValueError(f"nn.MultiheadAttention has bias={theirs} but this module has bias={ours}")

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}, dropout={self.dropout_p}"
