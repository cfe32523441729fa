"""Checkers for notebook 10's exercises (the encoder-decoder transformer)."""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from . import checker, require
from .nb00 import callable_problem


def _ids(answer, name: str) -> torch.Tensor:
    if isinstance(answer, (list, tuple)):
        answer = torch.tensor(answer)
    if not isinstance(answer, torch.Tensor):
        raise TypeError(f"expected {name} as a torch.Tensor of token ids, got {type(answer).__name__}")
    return answer


@checker("10.1")
def decoder_input(answer, tgt: torch.Tensor, bos_id: int = 1) -> tuple[bool, str]:
    """The decoder input for teacher forcing: ``<bos>`` then ``tgt[:, :-1]``, shape ``(B, Lt)``."""
    answer = _ids(answer, "tgt_in")
    if answer.is_floating_point() or answer.is_complex() or answer.dtype == torch.bool:
        return False, (f"the ids have dtype {answer.dtype}: token ids are integers (torch.long, like tgt), which the "
                       "embedding layer looks up")
    right = torch.cat([tgt.new_full((tgt.shape[0], 1), bos_id), tgt[:, :-1]], dim=1)
    if answer.shape != right.shape:
        if answer.shape == (tgt.shape[0], tgt.shape[1] + 1):
            return False, (f"shape {tuple(answer.shape)} is one too long: drop the last target token, since no "
                           "position has to predict anything after it")
        if answer.shape == (tgt.shape[0], tgt.shape[1] - 1):
            return False, (f"shape {tuple(answer.shape)} is one too short: the decoder needs one input per target "
                           "token, (B, Lt) = " + str(tuple(tgt.shape)))
        return False, f"expected shape {tuple(right.shape)} (one input per target position), got {tuple(answer.shape)}"
    if torch.equal(answer, tgt):
        return False, ("this is the target itself: position t would be shown the very token it must predict, "
                       "so the model learns to copy and fails at generation")
    if torch.equal(answer[:, :-1], tgt[:, 1:]):
        return False, "this is shifted left (the future): shift right, so position t sees targets 0..t-1"
    if not (answer[:, 0] == bos_id).all():
        return False, f"every row must start with <bos> (id {bos_id}); the first column holds {answer[:, 0].tolist()}"
    if not torch.equal(answer, right):
        wrong = (answer != right).nonzero()[0].tolist()
        return False, f"row {wrong[0]}, position {wrong[1]} is not what teacher forcing feeds there"
    return True, "<bos>, then the target shifted right by one"


@checker("10.2")
def memory_mask(answer, src: torch.Tensor, pad_id: int = 0, num_heads: int = 4, tgt_len: int = 11) -> tuple[bool, str]:
    """The source padding as a 4-D attention mask for ``F.scaled_dot_product_attention`` (exercise 3's
    cross-attention): ``(B, 1, 1, Ls)`` bool, True at real tokens. attnlib's layers take the same information as a
    ``key_padding_mask (B, Ls)``; a 2-D ``mask`` would mean ``(Lq, Lk)``, hence the 4-D form here."""
    if not isinstance(answer, torch.Tensor):
        return False, f"expected a bool torch.Tensor, got {type(answer).__name__}"
    B, Ls = src.shape
    real = src != pad_id  # (B, Ls)
    if answer.dtype != torch.bool:
        return False, f"expected dtype torch.bool (True = may attend), got {answer.dtype}"
    if answer.dim() == 2:
        if answer.shape == (B, Ls) and torch.equal(answer, real):
            return False, (f"this is the key_padding_mask {tuple(answer.shape)}, the form attnlib's layers take; "
                           "F.scaled_dot_product_attention reads a 2-D mask as (Lq, Lk), one row per query, so give "
                           "it the axes that make it broadcast over the heads and the target positions")
        return False, (f"a 2-D mask {tuple(answer.shape)} is read as (Lq, Lk), one row per query, not one row per "
                       "sequence: add the missing axes so that it broadcasts over the heads and the target positions")
    if answer.dim() != 4:
        return False, f"expected a 4-D mask that broadcasts to (B, heads, Lt, Ls), got shape {tuple(answer.shape)}"
    if answer.shape == (B, 1, Ls, 1) or answer.shape == (B, Ls, 1, 1):
        return False, (f"shape {tuple(answer.shape)} puts the source positions on a query axis; the source is "
                       "the keys, the last axis")
    want = real[:, None, None, :].expand(B, num_heads, tgt_len, Ls)
    try:
        full = answer.expand(B, num_heads, tgt_len, Ls)
    except RuntimeError:
        full = None
    if full is not None and torch.equal(full, want):
        return True, "every target position may look at every real source token, and at no pad"
    if B > 1 and answer.shape[0] == 1 and answer.shape[1] == B and answer.shape[-1] == Ls:
        return False, (f"shape {tuple(answer.shape)} puts the batch axis where the heads go: the first axis is the "
                       f"batch (B = {B}), the second the heads, so that each sequence gets its own row of the mask")
    if full is None:
        return False, f"shape {tuple(answer.shape)} does not broadcast to (B, h, Lt, Ls) = {(B, num_heads, tgt_len, Ls)}"
    if torch.equal(full, ~want):
        return False, "the polarity is inverted: in attnlib True means 'may attend', so True must mark the real tokens"
    b, head, t = (int(i) for i in (full != want).nonzero()[0, :3])
    shared = (" (your mask has one row for the whole batch, so every sequence gets the same mask: keep the batch "
              "axis first, with one row per sequence)" if B > 1 and answer.shape[0] == 1 else "")
    return False, (f"sequence {b} has {int(real[b].sum())} real tokens, but your mask lets its target position {t} "
                   f"(head {head}) attend to source positions {full[b, head, t].nonzero().flatten().tolist()}{shared}")


def _greedy_reading_pads(model, src, src_key_padding_mask, max_len):
    """Greedy decoding whose encoder masks the source's pads but whose cross-attention reads them (the usual slip)."""
    state = model.encode(src, src_key_padding_mask)._replace(src_key_padding_mask=None)
    token = torch.full((src.shape[0],), model.bos_id, dtype=torch.long)
    done, ids = torch.zeros(src.shape[0], dtype=torch.bool), []
    for _ in range(max_len):
        logits, state, _ = model.decode_step(token, state, need_weights=False)
        token = logits.argmax(-1)
        ids.append(token.masked_fill(done, model.pad_id))
        done |= token == model.eos_id
        if bool(done.all()):
            break
    return torch.stack(ids, 1)


_PRODUCTS = {"linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "addmm", "baddbmm", "addbmm",
             "tensordot", "inner", "mv", "addmv"}


class _MemoryProducts(TorchFunctionMode):
    """Counts the matrix products (``F.linear``, ``@``, ``matmul``, ``einsum``, ...) that take the encoder's memory, or
    a view of it, as an operand: each projection of the memory into keys or values is one, however it is written."""

    def __init__(self):
        super().__init__()
        self.memories: list[torch.Tensor] = []  # the encoder's outputs (a forward hook appends them)
        self.count = 0

    def _is_memory(self, x) -> bool:
        if isinstance(x, (list, tuple)):
            return any(self._is_memory(y) for y in x)
        return isinstance(x, torch.Tensor) and any(
            x.untyped_storage().data_ptr() == m.untyped_storage().data_ptr() for m in self.memories)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _PRODUCTS and self.memories and (
                self._is_memory(args) or self._is_memory(tuple(kwargs.values()))):
            self.count += 1
        return func(*args, **kwargs)


def _matches(ids: torch.Tensor, reference: torch.Tensor, eos: int) -> bool:
    """Every row of ``ids`` equals ``reference``'s row up to and including its ``<eos>``."""
    for got, want in zip(ids.tolist(), reference.tolist()):
        want = want[: want.index(eos) + 1] if eos in want else want
        if got[: len(want)] != want:
            return False
    return True


@checker("10.3")
def cached_greedy(answer, model, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None,
                  max_len: int = 11) -> tuple[bool, str]:
    """A function ``fn(model, src, src_key_padding_mask, max_len) -> ids (B, T)``: greedy decoding that keeps a
    cache, so that each step runs the decoder on the new token only and the cross-attention's keys and values
    are projected from the memory once per layer, not once per step. Its ids must be greedy decoding's."""
    require(callable_problem(answer, "a function fn(model, src, src_key_padding_mask, max_len)"))
    from ..decoding import greedy_decode

    positions, cross_projections, self_projected = [], [], []
    products = _MemoryProducts()  # counts every matrix product that reads the memory, module or not
    hooks = [model.encoder.register_forward_hook(lambda m, args, out: products.memories.append(out.detach()))]
    for layer, block in enumerate(model.decoder):  # record what each decoder layer computes, step by step
        hooks.append(block.ff.register_forward_pre_hook(lambda m, args: positions.append(args[0].shape[1])))
        for which in ("w_k", "w_v"):
            hooks.append(getattr(block.cross_attn, which).register_forward_pre_hook(
                lambda m, args, key=(layer, which): cross_projections.append(key)))
            hooks.append(getattr(block.self_attn, which).register_forward_pre_hook(
                lambda m, args: self_projected.append(args[0].shape[1] if args[0].dim() == 3 else 1)))
    try:
        with torch.no_grad(), products:
            ids = answer(model, src, src_key_padding_mask, max_len)
    finally:
        for h in hooks:
            h.remove()
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != src.shape[0]:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        return False, f"expected ids of shape (B, T) with B = {src.shape[0]}, got {got}"
    if not positions:
        return False, "the decoder blocks never ran: decode with the model's own blocks (model.decoder)"
    if max(positions) > 1:
        return False, (f"a decoder block was run on {max(positions)} target positions at once: that recomputes the "
                       "prefix at every step (greedy_decode and model.decode do); feed the new token only and let "
                       "the self-attention read the earlier ones from a KVCache")
    steps = len(positions) // len(model.decoder)
    if self_projected and max(self_projected) > 1:
        return False, (f"the self-attention projected keys or values from {max(self_projected)} positions in one step: "
                       "that recomputes the prefix's keys and values; keep them, projected, in a KVCache and "
                       "project the new token only")
    for which, name in (("w_k", "keys"), ("w_v", "values")):
        per_layer = max(cross_projections.count((i, which)) for i in range(len(model.decoder)))
        if per_layer > 1:
            return False, (f"the cross-attention's {name} were projected from the memory {per_layer} times in one "
                           f"layer over {steps} steps: the memory does not change while decoding, so project its "
                           "keys and values once per layer, before the loop")
    n_layers = len(model.decoder)
    if products.count > 2 * n_layers:
        return False, (f"the encoder's memory went through {products.count} matrix products over {steps} steps, "
                       f"{n_layers} decoder layers: projecting it into each layer's keys and values takes "
                       f"{2 * n_layers}, once, before the loop (the memory does not change while decoding)")
    with torch.no_grad():
        right = greedy_decode(model, src, src_key_padding_mask, max_len=max_len)  # (B, T')
    eos, pad = model.eos_id, model.pad_id
    padded = src_key_padding_mask is not None and not bool(src_key_padding_mask.all())
    for b in range(src.shape[0]):
        want = right[b].tolist()
        want = want[: want.index(eos) + 1] if eos in want else want
        got = ids[b].tolist()[: len(want)]
        if got != want:
            t = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), len(got))
            with torch.no_grad():
                reads_pads = padded and _matches(ids, _greedy_reading_pads(model, src, src_key_padding_mask,
                                                                           max_len), eos)
            hint = (" (your ids are those of a decoder whose cross-attention reads the source's pads: mask them "
                    "there too)" if reads_pads else
                    " (compare your step t with greedy_decode's: the embedding times √d_model, plus position t's "
                    "encoding; the post-norm order of the three sublayers; the self-attention over the cached "
                    "tokens; the cross-attention's queries from the new token)")
            return False, f"row {b} differs from greedy decoding at step {t}{hint}"
        after = ids[b, len(want):]
        if eos in want and bool((after != pad).any()):
            return False, (f"row {b} goes on after its <eos>: a finished row must hold the pad id ({pad}) from then "
                           "on, as greedy decoding's does")
    memory_note = (f"the encoder's memory in {products.count} matrix products in all (its keys and values, once per "
                   f"layer, for {n_layers} layers)" if products.memories else
                   "w_k and w_v called on the memory once per layer")
    return True, f"one target position per block call over {steps} steps, {memory_note}, and the same ids as greedy decoding"
