"""Checkers for notebook 10's exercises (the encoder-decoder transformer)."""
from __future__ import annotations

import numbers

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from . import checker, require
from .nb00 import callable_problem


def _reference_batch(seqs, pad: int, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The checker's own target ``(B, L)`` (each sequence, ``<eos>``, pads) and decoder input ``(B, L)``."""
    from ..data import pad_sequences, shift_right

    tgt = pad_sequences([list(s) + [eos] for s in seqs], pad)  # (B, L), L = longest + 1
    return tgt, shift_right(tgt, bos)


def _target_problem(answer, seqs, right: torch.Tensor, pad: int, bos: int, eos: int) -> str | None:
    """A sentence saying what is wrong with the padded target, or None."""
    if not isinstance(answer, torch.Tensor):
        return f"tgt should be a torch.Tensor of token ids, got {type(answer).__name__}"
    if answer.is_floating_point() or answer.is_complex() or answer.dtype == torch.bool:
        return f"tgt has dtype {answer.dtype}: token ids are integers (torch.long), which the loss looks up"
    B, L = right.shape
    if answer.dim() != 2 or answer.shape[0] != B:
        return f"tgt should have one row per sequence, shape (B, L) with B = {B}, got {tuple(answer.shape)}"
    if answer.shape[1] == L + 1 and bool((answer[:, 0] == bos).all()):
        return ("tgt starts with <bos>: <bos> is the decoder's first input, never something the model must predict, "
                "so it has no place in the target")
    if answer.shape[1] == L - 1 and not bool((answer == eos).any()):
        return ("tgt has no <eos>: every sequence needs one right after its last token (the model must learn where "
                "to stop), and the longest sequence then needs one more column")
    if answer.shape[1] != L:
        return (f"tgt has {answer.shape[1]} columns: a batch is as long as its longest row, here the longest sequence "
                "plus its <eos>, and no longer")
    for b, seq in enumerate(seqs):
        n, row = len(seq), answer[b].tolist()
        if row[:n] != list(seq):
            return f"tgt's row {b} does not start with sequence {b}'s tokens, in order"
        if row[n] != eos:
            if eos in row[n:]:
                return (f"tgt's row {b} has its <eos> after the pads: <eos> comes right after the last real token, "
                        "the pads after it")
            return (f"tgt's row {b} has no <eos> (id {eos}) right after its last token: the model must learn where "
                    "to stop")
        if any(i != pad for i in row[n + 1:]):
            return (f"tgt's row {b} holds ids other than the pad id ({pad}) after its <eos>: everything after <eos> "
                    "is padding")
    return None


def _input_problem(answer, tgt: torch.Tensor, right: torch.Tensor, pad: int, bos: int) -> str | None:
    """A sentence saying what is wrong with the decoder input, or None. Where the target is a pad, any input is right:
    under the causal mask it only reaches outputs whose targets are pads too, which the loss skips."""
    if not isinstance(answer, torch.Tensor):
        return f"tgt_in should be a torch.Tensor of token ids, got {type(answer).__name__}"
    if answer.is_floating_point() or answer.is_complex() or answer.dtype == torch.bool:
        return f"tgt_in has dtype {answer.dtype}: token ids are integers (torch.long), which the embedding looks up"
    if answer.shape != tgt.shape:
        return (f"tgt_in has shape {tuple(answer.shape)}, the target {tuple(tgt.shape)}: the decoder gets one input "
                "per target position")
    if torch.equal(answer, tgt):
        return ("tgt_in is the target itself: position t would be shown the very token it must predict, so the "
                "model learns to copy")
    if torch.equal(answer[:, :-1], tgt[:, 1:]):
        return "tgt_in is the target shifted left (the future): position t must see targets 0..t-1 only"
    if not bool((answer[:, 0] == bos).all()):
        return f"every row of tgt_in must start with <bos> (id {bos}), the input of the first position"
    real = tgt != pad
    wrong = ((answer != right) & real).nonzero()
    if len(wrong):
        b, t = wrong[0].tolist()
        return (f"tgt_in's row {b}, position {t} is not what teacher forcing feeds there: position t is given the "
                "target tokens before position t")
    return None


def _loss_problem(answer, model, src: torch.Tensor, tgt: torch.Tensor, tgt_in: torch.Tensor) -> str | None:
    """A sentence saying what is wrong with the loss, or None; the typical slips are recomputed and named. ``tgt_in``
    is the learner's decoder input, already accepted: it may differ from the shift right where the target is a pad,
    which changes the logits there (so the slips that count those positions) but not at the real positions."""
    if isinstance(answer, (torch.Tensor, np.ndarray)):
        size, kind = (answer.size, "an array") if isinstance(answer, np.ndarray) else (answer.numel(), "a tensor")
        if size != 1:
            return (f"the loss should be one number (a 0-d tensor or a float), got {kind} of shape "
                    f"{tuple(answer.shape)}")
        answer = answer.item()
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, numbers.Real):
        return f"the loss should be one number (a 0-d tensor or a float), got {type(answer).__name__}"
    answer = float(answer)  # a Python, NumPy or 0-d tensor number alike
    from ..training import sequence_loss

    pad, eos = model.pad_id, model.eos_id
    memory = model.encode(src).memory
    logits = model.decode(tgt_in.long(), memory)  # (B, L, V), on the learner's own (accepted) decoder input
    real = tgt != pad

    def nll(lg):  # (B, L): minus the log-probability of each target token
        return -lg.log_softmax(-1).gather(-1, tgt[..., None])[..., 0]

    per = nll(logits)
    right = float(sequence_loss(model(src, tgt), tgt, pad))  # the training loop's loss (ignore_index = pad)
    if abs(answer - right) <= 1e-4 * max(1.0, abs(right)):
        return None
    slips = [
        (per.mean(), "the loss counts the pad positions too, but they belong to no sequence and get no loss"),
        (per[tgt_in != pad].mean(), ("the loss counts positions whose target is a pad (its real positions were picked "
                                     "from the decoder input); pick them from the target")),
        (per[real & (tgt != eos)].mean(), ("the loss leaves out the <eos> positions, but predicting the end is part "
                                           "of the task: <eos> is a real target token")),
        (((per * real).sum(1) / real.sum(1)).mean(), ("the loss averages each sequence first, which weighs a short "
                                                      "sequence's tokens more; take one mean over all the real "
                                                      "positions of the batch")),
        (per[real].sum(), "the loss is the sum over the real positions, not their mean"),
        (-per[real].mean(), "the loss has the wrong sign: it is minus the log-probability of the right token"),
        ((-logits.gather(-1, tgt[..., None])[..., 0])[real].mean(), ("the loss reads the logits as "
                                                                   "log-probabilities; take log_softmax over the "
                                                                   "vocabulary first")),
        (nll(model.decode(tgt, memory))[real].mean(), ("the loss comes from logits of the target itself fed as the "
                                                        "decoder input; run the decoder on tgt_in")),
        ((-logits[:, :-1].log_softmax(-1).gather(-1, tgt[:, 1:, None])[..., 0])[real[:, 1:]].mean(),
         ("the loss shifts a second time: tgt_in is already shifted right, so the logits at position t are scored "
          "against the target at position t, not t + 1")),
        ((-logits.log_softmax(-1).gather(-1, tgt_in.long()[..., None])[..., 0])[real].mean(),
         ("the loss scores each position's own input token (tgt_in); the logits at position t predict the target "
          "token there, tgt[t]")),
        (per[real].sum() / tgt.shape[0], ("the loss divides its sum by the number of sequences; the mean is over "
                                          "positions")),
        (per[real].sum() / tgt.numel(), ("the loss divides its sum by every position of the rectangle, pads "
                                         "included")),
    ]
    for value, says in slips:
        value = float(value)
        if abs(value - right) > 1e-4 * max(1.0, abs(right)) and abs(answer - value) <= 1e-4 * max(1.0, abs(value)):
            return says
    return "your loss is not the loss training minimises on this batch"


@checker("10.1")
def padded_batch(answer, seqs, model, src: torch.Tensor) -> tuple[bool, str]:
    """A function ``fn(model, src, seqs) -> (tgt, tgt_in, loss)`` for target id lists ``seqs`` of different lengths
    (no ``<eos>``): the padded target ``(B, L)`` (each sequence, ``<eos>``, then pads; L = longest + 1), the decoder
    input ``(B, L)`` teacher forcing feeds, and the teacher-forced loss, the mean cross-entropy over the target's
    real (non-pad) positions, which must equal attnlib's ``sequence_loss`` on the same batch. It is run on ``seqs``,
    on the same sequences each moved up one row (so that a length read off one row, not the batch, shows), and on a
    bigger batch: ``seqs`` plus one sequence two tokens longer than the longest, with one more source row (so that a
    B, an L or a count of real tokens typed in for the notebook's batch shows)."""
    require(callable_problem(answer, "a function fn(model, src, seqs) returning (tgt, tgt_in, loss)"))
    pad, bos, eos = model.pad_id, model.bos_id, model.eos_id
    seqs = [list(s) for s in seqs]
    moved = seqs[1:] + seqs[:1], torch.cat([src[1:], src[:1]])  # every row moved up one, the first to the end
    tokens = [i for s in seqs for i in s] or [eos]
    longer = [tokens[i % len(tokens)] for i in range(max(map(len, seqs)) + 2)]  # target ids the batch already uses
    bigger = seqs + [longer], torch.cat([src, src[-1:].flip(1)])  # B + 1 rows, L + 2 columns, more real tokens
    wheres = ("", "on the same sequences moved up one row each (the first one last), ",
              "on a bigger batch (one more sequence, two tokens longer than the longest), ")
    for where, (batch, source) in zip(wheres, ((seqs, src), moved, bigger)):
        try:
            with torch.no_grad():
                out = answer(model, source, [list(s) for s in batch])
        except Exception as error:  # e.g. a row longer than a width read off another row
            return False, (f"{where}your function raised {type(error).__name__}: {error} (if a row did not fit: "
                           "L must fit every sequence of the batch with its <eos>, whichever row it sits in)")
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            got = f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__
            return False, f"expected the function to return three values (tgt, tgt_in, loss), got {got}"
        tgt, tgt_in, loss = out
        right_tgt, right_in = _reference_batch(batch, pad, bos, eos)
        for problem in (lambda: _target_problem(tgt, batch, right_tgt, pad, bos, eos),
                        lambda: _input_problem(tgt_in, right_tgt, right_in, pad, bos),
                        lambda: _loss_problem(loss, model, source, right_tgt, tgt_in)):
            with torch.no_grad():
                said = problem()
            if said:
                return False, where + said
    return True, ("<eos> after each sequence, then pads; <bos> and the target shifted right as the input (what it "
                  "holds where the target is a pad never reaches the loss); and the mean over the real target "
                  "positions, as sequence_loss computes it")


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
