"""Multi-head attention, the one attention module of attnlib, and its key/value cache.

Built in notebook 05 (heads, split and merge); it grows options in the notebooks that need them,
and every model of the series uses it:

* ``num_kv_heads`` (notebook 12): grouped-query attention, g key/value heads shared by h query heads
  (g = h is multi-head attention, g = 1 multi-query attention). Query head i reads key/value head
  ``i // (h // g)``: consecutive query heads form a group, as in ``F.scaled_dot_product_attention(...,
  enable_gqa=True)`` and in Llama-style models such as SmolLM2 (notebook 13).
* ``rotary`` (notebook 12): rotary position embeddings rotate the queries and keys.
* ``window`` (notebook 12): each token sees only itself and the ``window - 1`` tokens before it.
* ``forward(..., cache=KVCache)`` (notebook 11): the keys and values of earlier tokens are kept, so a
  decoder computes only the new token's. Only the g key/value heads are stored.
* ``forward(..., head_mask=...)`` (taught in notebook 05; used in 11 and 13): remove heads to see what they did (ablation).
"""
from __future__ import annotations

import torch
from torch import nn

from ._checks import check_attention_mask, check_key_padding_mask, check_tensor, shape_of
from .attention import fused_attention, scaled_dot_product_attention
from .compat import copy_checked
from .positional import RotaryEmbedding


class KVCache:
    """The keys and values of one attention layer for every token seen so far, preallocated.

    ``KVCache(max_len)`` holds nothing until the first :meth:`append`, which allocates two tensors of
    ``(B, g, max_len, d_k)`` (B, g, d_k and the dtype taken from the first keys); later appends write
    into them in place, so generating a token never copies the past. ``len(cache)`` is the number of
    tokens held, which is also the position of the next token; ``k`` and ``v`` are views of what is held,
    ``(B, g, len, d_k)``. A model's cache is a list with one KVCache per layer (``model.new_cache()``).
    """

    def __init__(self, max_len: int):
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        self.max_len, self.length = max_len, 0
        self._k: torch.Tensor | None = None  # (B, g, max_len, d_k) once allocated
        self._v: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.length

    @property
    def k(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[:, :, : self.length]  # (B, g, len, d_k)

    @property
    def v(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]  # (B, g, len, d_k)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new ``k, v (B, g, T, d_k)`` after the ones held; return all of them, ``(B, g, len + T, d_k)``."""
        check_tensor("k", k, ndim=4)
        if not isinstance(v, torch.Tensor) or v.shape != k.shape:
            raise ValueError(f"v has shape {shape_of(v) if isinstance(v, torch.Tensor) else type(v).__name__} "
                             f"but k has shape {shape_of(k)}; they must be equal, (B, g, T, d_k)")
        B, g, T, d_k = k.shape
        if self._k is None:
            self._k = k.new_empty(B, g, self.max_len, d_k)
            self._v = v.new_empty(B, g, self.max_len, d_k)
        held = (self._k.shape[0], self._k.shape[1], self._k.shape[3])
        if (B, g, d_k) != held:
            raise ValueError(f"the cache holds (B, g, d_k) = {held} but the new keys have shape {shape_of(k)}, "
                             f"(B, g, d_k) = {(B, g, d_k)}; a cache serves one batch of one layer")
        if self.length + T > self.max_len:
            raise ValueError(f"the cache holds {self.length} tokens and max_len is {self.max_len}; "
                             f"{T} more would make {self.length + T}")
        self._k[:, :, self.length : self.length + T] = k
        self._v[:, :, self.length : self.length + T] = v
        self.length += T
        return self.k, self.v

    def nbytes(self) -> int:
        """Bytes of the keys and values held: ``2 * B * g * len * d_k * bytes per number``."""
        if self._k is None:
            return 0
        B, g, _, d_k = self._k.shape
        return 2 * B * g * self.length * d_k * self._k.element_size()

    def __repr__(self) -> str:
        heads = "" if self._k is None else f", batch={self._k.shape[0]}, kv_heads={self._k.shape[1]}"
        return f"KVCache(length={self.length}, max_len={self.max_len}{heads}, bytes={self.nbytes()})"


def causal_band(start: int, q_len: int, k_len: int, window: int | None, device=None) -> torch.Tensor | None:
    """The ``(q_len, k_len)`` causal mask of queries at positions ``start, start + 1, ...`` over keys ``0 .. k_len-1``.

    Query i (position ``start + i``) may see key j when ``j <= start + i`` and, with a ``window``,
    ``j > start + i - window``. Returns None when every query may see every key (nothing to mask).
    """
    last = start + q_len - 1  # the position of the last query
    if start >= k_len - 1 and (window is None or last - window < 0):
        return None
    i = torch.arange(start, start + q_len, device=device)[:, None]  # (q_len, 1): absolute positions
    j = torch.arange(k_len, device=device)[None, :]  # (1, k_len)
    allowed = j <= i
    return allowed if window is None else allowed & (j > i - window)  # (q_len, k_len)


class MultiHeadAttention(nn.Module):
    """Batch-first multi-head attention with separate ``w_q, w_k, w_v, w_o`` projections.

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: number of query heads h; each head works in ``d_k = d_model // h`` dimensions.
        dropout: dropout on the attention weights (training only).
        bias: whether the four projections have a bias.
        num_kv_heads: number of key/value heads g (default h); h must be a multiple of g. ``w_k`` and
            ``w_v`` map d_model to ``g * d_k``.
        rotary: a :class:`attnlib.RotaryEmbedding` of ``head_dim = d_k`` that rotates queries and keys
            by their positions, or None.
        window: if set, query i sees only keys ``i - window + 1 .. i`` (a sliding window; causal).

    ``forward(query (B, Lq, d_model), key (B, Lk, d_model), value (B, Lk, d_model), mask=None,
    need_weights=True, key_padding_mask=None, *, causal=False, cache=None, head_mask=None)`` returns
    ``(out (B, Lq, d_model), weights)`` where ``weights`` is ``(B, h, Lq, Lk)``, or None when
    ``need_weights=False``. Masks are bool, True = may attend:

    * ``mask``: ``(Lq, Lk)`` (e.g. ``causal_mask(L)``), shared by the batch and the heads, or 4-D
      ``(B, h, Lq, Lk)`` with size 1 where shared. A 3-D or 1-D mask is refused: broadcasting
      would read ``(B, Lq, Lk)`` as ``(h, Lq, Lk)``.
    * ``key_padding_mask``: ``(B, Lk)``, True = a real token (``padding_mask(lengths, Lk)``). It has
      its own argument because a 2-D ``mask`` always means ``(Lq, Lk)``.
    * ``causal=True``: query i sees keys 0..i (with a cache: the query at position ``len(cache) + i``
      sees keys ``0 .. len(cache) + i``), without building the mask when the fused kernel can do it.

    All given masks combine: a key is attended to only where every one allows it.

    ``cache``: a :class:`KVCache` (self-attention only). The new keys and values are appended to it and
    the queries attend to all of its keys (``Lk`` then counts the cached ones); rotary positions continue
    from ``len(cache)``. ``head_mask``: ``(h,)`` or ``(B, h)``, multiplying each head's output before
    ``w_o`` (1 keeps a head, 0 removes it); the returned weights are those before it.

    ``need_weights`` follows ``nn.MultiheadAttention``: ``need_weights=False`` makes ``weights`` None and
    sends the heads through PyTorch's fused ``F.scaled_dot_product_attention`` (same output, much less
    memory). The blocks and models built on it return only their output unless ``return_attention=True``.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True, *,
                 num_kv_heads: int | None = None, rotary: RotaryEmbedding | None = None, window: int | None = None):
        super().__init__()
        if num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={d_model} and num_heads={num_heads} "
                f"(d_model % num_heads = {d_model % num_heads if num_heads > 0 else 'undefined'})"
            )
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if isinstance(num_kv_heads, bool) or not isinstance(num_kv_heads, int) or num_kv_heads < 1 \
                or num_heads % num_kv_heads:
            raise ValueError(f"num_heads must be a multiple of num_kv_heads, got num_heads={num_heads} and "
                             f"num_kv_heads={num_kv_heads!r}")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        if rotary is not None and (not isinstance(rotary, RotaryEmbedding) or rotary.head_dim != self.d_k):
            got = f"head_dim={rotary.head_dim}" if isinstance(rotary, RotaryEmbedding) else type(rotary).__name__
            raise ValueError(f"rotary must be a RotaryEmbedding with head_dim = d_k = {self.d_k}, got {got}")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a positive int or None, got {window!r}")
        self.dropout_p, self.rotary, self.window = dropout, rotary, window
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)  # new: g heads of keys
        self.w_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)  # new: g heads of values
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor, heads: int | None = None) -> torch.Tensor:
        """(B, L, heads * d_k) -> (B, heads, L, d_k); ``heads`` defaults to ``num_heads``."""
        B, L, _ = x.shape
        return x.view(B, L, heads or self.num_heads, self.d_k).transpose(1, 2)  # (B, heads, L, d_k)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h, L, d_k) -> (B, L, d_model). Transpose back *before* flattening the heads."""
        B, h, L, d_k = x.shape
        return x.transpose(1, 2).reshape(B, L, h * d_k)  # (B, L, d_model)

    def _check_inputs(self, query, key, value, mask, key_padding_mask, cache, head_mask) -> int:
        """Raise ValueError for any input that does not fit; return the number of keys attended to."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, x, ndim=3)
            if x.shape[-1] != self.d_model:
                raise ValueError(f"{name} has shape {shape_of(x)} but its last dimension must be d_model={self.d_model}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key has shape {shape_of(key)} but value has shape {shape_of(value)}; "
                             "batch size and length must match")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query has shape {shape_of(query)} but key has shape {shape_of(key)}; "
                             "the batch sizes must match")
        k_len = key.shape[1]
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise ValueError(f"cache must be a KVCache, got {type(cache).__name__}")
            if key.shape[1] != query.shape[1]:
                raise ValueError(f"a cache serves self-attention: query has shape {shape_of(query)} but key has "
                                 f"shape {shape_of(key)}; pass the new tokens as query, key and value")
            k_len += len(cache)
        if mask is not None:
            target = (query.shape[0], self.num_heads, query.shape[1], k_len)
            check_attention_mask(mask, target, ("B", "h", "Lq", "Lk"), padding_arg="key_padding_mask")
        if key_padding_mask is not None:
            check_key_padding_mask(key_padding_mask, key.shape[0], k_len)
        if head_mask is not None:
            check_tensor("head_mask", head_mask)
            if shape_of(head_mask) not in ((self.num_heads,), (query.shape[0], self.num_heads)):
                raise ValueError(f"head_mask has shape {shape_of(head_mask)} but it must be (h,) = ({self.num_heads},) "
                                 f"or (B, h) = {(query.shape[0], self.num_heads)}")
        return k_len

    def _mask(self, mask, key_padding_mask, causal, start, q_len, k_len, device) -> torch.Tensor | None:
        """Every constraint as one bool mask that broadcasts to ``(B, h, Lq, Lk)``, or None."""
        if causal or self.window is not None:
            band = causal_band(start, q_len, k_len, self.window, device)  # (Lq, Lk) or None
            mask = band if mask is None else (mask if band is None else mask & band)
        if key_padding_mask is not None:
            keys = key_padding_mask[:, None, None, :]  # (B, 1, 1, Lk)
            mask = keys if mask is None else keys & mask
        if mask is not None and mask.dim() == 2:
            mask = mask[None, None]  # (1, 1, Lq, Lk)
        return mask

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        key_padding_mask: torch.Tensor | None = None,
        *,
        causal: bool = False,
        cache: KVCache | None = None,
        head_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` over ``key``/``value``; see the class docstring for shapes and masks."""
        k_len = self._check_inputs(query, key, value, mask, key_padding_mask, cache, head_mask)
        start = 0 if cache is None else len(cache)  # the position of the first new token
        g = self.num_kv_heads
        q = self.split_heads(self.w_q(query))  # (B, h, Lq, d_k)
        k = self.split_heads(self.w_k(key), g)  # (B, g, Lk_new, d_k)
        v = self.split_heads(self.w_v(value), g)  # (B, g, Lk_new, d_k)
        if self.rotary is not None:
            q = self.rotary(q, torch.arange(start, start + q.shape[2], device=q.device))
            k = self.rotary(k, torch.arange(start, start + k.shape[2], device=k.device))
        if cache is not None:
            k, v = cache.append(k, v)  # (B, g, Lk, d_k): the cached tokens, then the new ones
        p = self.dropout_p if self.training else 0.0
        plain_causal = causal and mask is None and key_padding_mask is None and self.window is None and start == 0
        if not need_weights and plain_causal and q.shape[2] == k_len:
            heads, weights = fused_attention(q, k, v, dropout_p=p, is_causal=True), None  # no mask is built
        else:
            full = self._mask(mask, key_padding_mask, causal, start, q.shape[2], k_len, q.device)
            if need_weights:
                group = self.num_heads // g
                kh, vh = (k, v) if group == 1 else (k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
                heads, weights = scaled_dot_product_attention(q, kh, vh, full, dropout_p=p)  # (B, h, Lq, d_k)
            else:
                heads, weights = fused_attention(q, k, v, full, dropout_p=p), None
        if head_mask is not None:
            scale = head_mask.to(heads.dtype)  # (h,) or (B, h)
            heads = heads * (scale[:, None, None] if scale.dim() == 1 else scale[:, :, None, None])
        return self.w_o(self.merge_heads(heads)), weights  # (B, Lq, d_model)

    @torch.no_grad()
    def copy_from_torch(self, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of an ``nn.MultiheadAttention`` of the same size into this module.

        Then both run on a probe input (eval mode); if their outputs differ, the copy is undone and a
        ValueError is raised. The source may be batch-first or not.
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

        mine = self.w_q.weight
        copy_checked(self, mha, copy, lambda x: self(*(x.to(mine),) * 3)[0].to(x), run_theirs, self.d_model,
                     "nn.MultiheadAttention")
        return self

    def _check_copyable(self, mha: nn.MultiheadAttention) -> None:
        """Raise ValueError if ``mha``'s size or kind is one this module cannot reproduce."""
        if mha.embed_dim != self.d_model or mha.num_heads != self.num_heads:
            raise ValueError(
                f"nn.MultiheadAttention has embed_dim={mha.embed_dim}, num_heads={mha.num_heads}; "
                f"expected d_model={self.d_model}, num_heads={self.num_heads}"
            )
        if self.num_kv_heads != self.num_heads or self.rotary is not None or self.window is not None:
            raise ValueError(f"nn.MultiheadAttention has neither shared key/value heads, rotary positions nor a "
                             f"window; this module has num_kv_heads={self.num_kv_heads}, "
                             f"rotary={self.rotary is not None}, window={self.window}")
        if mha.in_proj_weight is None:
            raise ValueError("nn.MultiheadAttention with separate kdim/vdim is not supported")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("nn.MultiheadAttention with add_bias_kv or add_zero_attn is not supported")
        theirs, ours = mha.in_proj_bias is not None, self.w_q.bias is not None
        if theirs != ours:  # copying would succeed but the outputs would differ
            raise ValueError(f"nn.MultiheadAttention has bias={theirs} but this module has bias={ours}")

    def extra_repr(self) -> str:
        extra = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        extra += "" if self.window is None else f", window={self.window}"
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}{extra}, dropout={self.dropout_p}"
