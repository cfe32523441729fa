"""Checkers for notebook 10's exercises (the encoder-decoder transformer)."""
from __future__ import annotations

import torch

from . import checker


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
        return False, f"row {wrong[0]}, position {wrong[1]} should be target token {wrong[1] - 1}, i.e. {int(right[tuple(wrong)])}"
    return True, "<bos>, then the target shifted right by one"


@checker("10.2")
def memory_mask(answer, src: torch.Tensor, pad_id: int = 0, num_heads: int = 4, tgt_len: int = 11) -> tuple[bool, str]:
    """The cross-attention mask for a padded batch ``src (B, Ls)``: ``(B, 1, 1, Ls)`` bool, True at real tokens."""
    if not isinstance(answer, torch.Tensor):
        return False, f"expected a bool torch.Tensor, got {type(answer).__name__}"
    B, Ls = src.shape
    real = src != pad_id  # (B, Ls)
    if answer.dtype != torch.bool:
        return False, f"expected dtype torch.bool (True = may attend), got {answer.dtype}"
    if answer.dim() == 2:
        return False, (f"a 2-D mask {tuple(answer.shape)} is read as (Lq, Lk), one row per query, not one row per "
                       "sequence: add the head and query dimensions, (B, 1, 1, Ls)")
    if answer.dim() != 4:
        return False, f"expected a 4-D mask (B, 1, 1, Ls) = {(B, 1, 1, Ls)}, got shape {tuple(answer.shape)}"
    if answer.shape == (B, 1, Ls, 1) or answer.shape == (B, Ls, 1, 1):
        return False, (f"shape {tuple(answer.shape)} puts the source positions on a query axis; the source is "
                       "the keys, the last axis: (B, 1, 1, Ls)")
    try:
        full = answer.expand(B, num_heads, tgt_len, Ls)
    except RuntimeError:
        return False, f"shape {tuple(answer.shape)} does not broadcast to (B, h, Lt, Ls) = {(B, num_heads, tgt_len, Ls)}"
    want = real[:, None, None, :].expand(B, num_heads, tgt_len, Ls)
    if torch.equal(full, ~want):
        return False, "the polarity is inverted: in attnlib True means 'may attend', so True must mark the real tokens"
    if not torch.equal(full, want):
        b = int((full != want).any(-1).any(-1).any(-1).nonzero()[0])
        return False, (f"sequence {b} has {int(real[b].sum())} real tokens, but your mask lets it attend to "
                       f"{answer[b].reshape(-1, answer.shape[-1])[0].nonzero().flatten().tolist()}")
    return True, "every target position may look at every real source token, and at no pad"


@checker("10.3")
def greedy_by_hand(answer, model, src: torch.Tensor, max_len: int = 11) -> tuple[bool, str]:
    """Greedy decoding of one source ``src (1, Ls)`` written out: the generated ids up to and including ``<eos>``."""
    answer = _ids(answer, "your ids").flatten().tolist()
    from ..decoding import greedy_decode

    c = model.config
    with torch.no_grad():
        ids = greedy_decode(model, src, max_len=max_len)
        right = ids[0].tolist()
        if c.eos_id in right:
            right = right[: right.index(c.eos_id) + 1]
        memory = model.encode(src).memory
        bos = torch.tensor([[c.bos_id]])
        from_bos_only = model.decode(bos, memory)[0, -1].argmax().item()
    if answer == right:
        return True, "each prediction was fed back in as the next input, until <eos>"
    if answer and answer[0] == c.bos_id:
        return False, "your ids start with <bos>: that is the decoder's first input, not a generated token; leave it out"
    if answer[: len(right)] == right and len(answer) > len(right):
        return False, f"right up to <eos>, then {len(answer) - len(right)} more: stop after <eos> (id {c.eos_id})"
    if right[: len(answer)] == answer and c.eos_id not in answer:
        return False, (f"the first {len(answer)} tokens are right but the output stops early; "
                       f"decode until <eos> (id {c.eos_id}) or max_len={max_len}")
    if len(answer) > 1 and all(a == from_bos_only for a in answer) and len(set(right)) > 1:
        return False, ("every step predicts the same token: the input never grows. Append each prediction to "
                       "the decoder input before the next step")
    first = next(i for i, (a, r) in enumerate(zip(answer + [None] * len(right), right)) if a != r)
    return False, (f"step {first} predicted {answer[first] if first < len(answer) else 'nothing'} but greedy decoding "
                   f"gives {right[first]}: the next token is the argmax of the LAST position's logits")
