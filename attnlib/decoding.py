"""Generating a target one token at a time, for both seq2seq families: greedy decoding and beam search.

Both functions speak only the protocol that :class:`attnlib.Seq2Seq` (LSTM) and
:class:`attnlib.Seq2SeqTransformer` share: ``model.encode(src, src_key_padding_mask) -> state``,
``model.decode_step(tokens (B,), state, need_weights) -> (logits (B, V), state, weights or None)``,
``state.select(rows)``
and the ids ``model.bos_id``, ``model.eos_id``, ``model.pad_id``. They run in eval mode and give the
model back its own mode. Greedy decoding is built by hand in notebook 01 (section 5), beam search in
notebook 01 (section 9).
"""
from __future__ import annotations

import torch

from ._checks import check_positive_int
from .runtime import eval_mode

__all__ = ["beam_search", "greedy_decode"]


def _stack_steps(steps: list):
    """One step's weights after another, on the dimension before the last: ``(B, Ls)`` per step ->
    ``(B, T, Ls)``; a list per layer of ``(B, h, Ls)`` -> a list per layer of ``(B, h, T, Ls)``."""
    if steps[0] is None:
        return None
    if isinstance(steps[0], (list, tuple)):
        return [torch.stack(layer, dim=-2) for layer in zip(*steps)]
    return torch.stack(steps, dim=-2)


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None, max_len: int = 50,
                  return_attention: bool = False):
    """Pick the most likely token at every step, until every sequence has emitted ``<eos>`` or ``max_len`` steps.

    ``src (B, Ls)``; ``src_key_padding_mask (B, Ls)`` bool, True at real tokens (None: ``src != pad_id``).
    Returns ``ids (B, T)`` with ``T <= max_len`` (ids after a sequence's ``<eos>`` are ``pad_id``), or with
    ``return_attention`` ``(ids, attention)``: row t of a map is the attention over the source used to
    predict token t, ``(B, T, Ls)`` for the LSTM (None without attention), one ``(B, h, T, Ls)`` per
    decoder layer for the transformer.
    """
    check_positive_int("max_len", max_len)
    with eval_mode(model):
        state = model.encode(src, src_key_padding_mask)
        tokens = torch.full((src.shape[0],), model.bos_id, dtype=torch.long, device=src.device)  # (B,)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        ids, maps = [], []
        for _ in range(max_len):
            logits, state, weights = model.decode_step(tokens, state, need_weights=return_attention)
            tokens = logits.argmax(-1)  # (B,)
            ids.append(tokens.masked_fill(done, model.pad_id))
            maps.append(weights)
            done = done | (tokens == model.eos_id)
            if bool(done.all()):
                break
    ids = torch.stack(ids, 1)  # (B, T)
    return (ids, _stack_steps(maps)) if return_attention else ids


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_key_padding_mask: torch.Tensor | None = None, beam_size: int = 5,
                max_len: int = 50, length_penalty: float = 1.0):
    """Keep the ``beam_size`` most likely partial outputs per input; return the best finished one.

    ``src`` is one sequence ``(Ls,)`` or a batch ``(B, Ls)``. The search ranks by total log
    probability; at the end each hypothesis is scored ``log p / length ** length_penalty``
    (0 = no normalisation, 1 = mean log probability per token, ``<eos>`` included).

    Returns ``(ids (B, T), scores (B,))`` (or ``(T,)`` and a 0-d score for one sequence); ids after
    ``<eos>`` are ``pad_id``. ``beam_size=1`` gives exactly :func:`greedy_decode`'s ids.
    """
    check_positive_int("beam_size", beam_size)
    check_positive_int("max_len", max_len)
    single = src.dim() == 1
    if single:
        src = src.unsqueeze(0)
        src_key_padding_mask = None if src_key_padding_mask is None else src_key_padding_mask.unsqueeze(0)
    with eval_mode(model):
        B, K, dev = src.shape[0], beam_size, src.device
        state = model.encode(src, src_key_padding_mask).select(torch.arange(B, device=dev).repeat_interleave(K))
        scores = torch.full((B, K), float("-inf"), dtype=torch.float64, device=dev)
        scores[:, 0] = 0.0  # all beams start identical: keep one alive
        tokens = torch.full((B * K,), model.bos_id, dtype=torch.long, device=dev)
        history = torch.empty(B * K, 0, dtype=torch.long, device=dev)
        done = torch.zeros(B * K, dtype=torch.bool, device=dev)
        lengths = torch.zeros(B * K, dtype=torch.float64, device=dev)
        for _ in range(max_len):
            logits, state, _ = model.decode_step(tokens, state, need_weights=False)
            logp = torch.log_softmax(logits.double(), -1)  # (B*K, V)
            V = logp.shape[-1]
            finished_row = torch.full((V,), float("-inf"), dtype=torch.float64, device=dev)
            finished_row[model.pad_id] = 0.0  # a finished hypothesis only extends with pad, at no cost
            logp = torch.where(done[:, None], finished_row, logp)
            top, idx = (scores.view(B * K, 1) + logp).view(B, K * V).topk(K, dim=1)  # (B, K)
            rows = (torch.arange(B, device=dev)[:, None] * K + idx // V).view(-1)
            tokens = (idx % V).view(-1)
            state = state.select(rows)
            lengths = lengths[rows] + (~done[rows]).double()
            done = done[rows] | (tokens == model.eos_id)
            history = torch.cat([history[rows], tokens[:, None]], 1)
            scores = top
            if bool(done.all()):
                break
        final = (scores.view(-1) / lengths.clamp(min=1) ** length_penalty).view(B, K)
        best_score, best = final.max(1)
        result = history[torch.arange(B, device=dev) * K + best]
    return (result[0], best_score[0]) if single else (result, best_score)
