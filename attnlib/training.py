"""Training: metrics, a History of them, and the two training loops of the series.

* :func:`train_seq2seq` trains either seq2seq family (:class:`attnlib.Seq2Seq`,
  :class:`attnlib.Seq2SeqTransformer`) by epochs over a :class:`attnlib.Seq2SeqData`: Adam (AdamW with
  ``weight_decay``), one-cycle learning rate, gradient clipping, optional scheduled sampling.
  :func:`evaluate` scores either family by free-running decoding (greedy or beam search).
* :func:`train_steps` trains a model that makes one prediction per position (the taggers of notebooks
  05, 06, 07 and 12) on a fresh batch every step: AdamW, cosine learning rate with optional warm-up.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from ._checks import check_fraction, check_positive_int, shape_of
from .runtime import get_device, progress_bar, seed_everything  # noqa: F401  (re-exported: attnlib.training.seed_everything)


# ------------------------------------------------------------------ metrics

def _align(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``pred`` cut or padded (with -1, which never matches) to the target's length."""
    if pred.dim() != 2 or target.dim() != 2 or pred.shape[0] != target.shape[0]:
        raise ValueError(
            f"pred has shape {tuple(pred.shape)} and target has shape {tuple(target.shape)}; "
            "both must be (B, T) with the same B"
        )
    T = target.shape[1]
    if pred.shape[1] >= T:
        return pred[:, :T]
    return torch.cat([pred, pred.new_full((pred.shape[0], T - pred.shape[1]), -1)], 1)


def token_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = 0) -> float:
    """Fraction of the non-pad target positions ``(B, T)`` where ``pred`` has the same token.

    ``pred`` ``(B, T')`` is cut or padded to ``T``; a missing prediction counts as wrong.
    """
    pred = _align(pred, target)
    real = target != pad_id
    return float(((pred == target) & real).sum() / real.sum().clamp(min=1))


def sequence_accuracy(pred: torch.Tensor, target: torch.Tensor, pad_id: int = 0) -> float:
    """Fraction of sequences whose every non-pad target token is predicted right (exact match)."""
    pred = _align(pred, target)
    ok = ((pred == target) | (target == pad_id)).all(1)
    return float(ok.float().mean()) if len(ok) else 0.0


def sequence_loss(logits: torch.Tensor, tgt: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Mean cross-entropy of ``logits (B, T, V)`` against ``tgt (B, T)`` over the real (non-pad) target tokens."""
    if logits.shape[:2] != tgt.shape:
        raise ValueError(f"logits has shape {shape_of(logits)} but tgt has shape {shape_of(tgt)}; (B, T) must match")
    return F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=pad_id)


def teacher_forcing_ratio(epoch: int, start: float = 1.0, decay: float = 0.9, floor: float = 0.0) -> float:
    """Scheduled sampling: ``max(floor, start * decay ** epoch)`` (``epoch`` counts from 0)."""
    for name, value in (("start", start), ("decay", decay), ("floor", floor)):
        check_fraction(name, value)
    return max(floor, start * decay**epoch)


# ------------------------------------------------------------------ history

class History:
    """Metrics per epoch (or per step), as a dict of lists: ``h.log(epoch=1, loss=0.3)``, then ``h["loss"]``."""

    def __init__(self) -> None:
        self._data: dict[str, list[float]] = {}

    def log(self, **metrics: float) -> None:
        for key, value in metrics.items():
            self._data.setdefault(key, []).append(float(value))

    def __getitem__(self, key: str) -> list[float]:
        if key not in self._data:
            raise KeyError(f"no metric {key!r}; logged: {sorted(self._data)}")
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def keys(self):
        return self._data.keys()

    def as_dict(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self._data.items()}

    def last(self, key: str) -> float:
        return self[key][-1]

    @property
    def _x(self) -> str:
        """What the entries count: ``"step"`` for :func:`train_steps`, else ``"epoch"``."""
        return "step" if "step" in self._data else "epoch"

    def __repr__(self) -> str:
        last = ", ".join(f"{k}={v[-1]:.4g}" for k, v in self._data.items() if k != self._x)
        return f"History({len(self._data.get(self._x, []))} {self._x}s: {last})"


# ------------------------------------------------------------------ seq2seq: evaluate and train (both families)

@torch.no_grad()
def evaluate(model, data, batch_size: int = 256, beam_size: int = 1, length_penalty: float = 1.0,
             device=None) -> dict[str, float]:
    """Token and whole-sequence accuracy of free-running decoding (greedy, or beam search with ``beam_size > 1``).

    Works for both seq2seq families. ``data`` is a :class:`attnlib.Seq2SeqData`; each batch decodes
    as many steps as its longest target. Every target position up to and including ``<eos>`` is
    scored; a missing or extra token counts as wrong. Returns ``{"token_acc": ..., "seq_acc": ...}``.
    """
    from .data import batches
    from .decoding import beam_search, greedy_decode

    device = device or next(model.parameters()).device
    pad = data.tgt_vocab.pad_id
    preds, targets = [], []
    for b in batches(data, batch_size, shuffle=False, device=device):
        T = b.tgt.shape[1]
        if beam_size == 1:
            pred = greedy_decode(model, b.src, b.src_key_padding_mask, max_len=T)
        else:
            pred, _ = beam_search(model, b.src, b.src_key_padding_mask, beam_size=beam_size, max_len=T,
                                  length_penalty=length_penalty)
        preds.append(_align(pred, b.tgt).cpu())
        targets.append(b.tgt.cpu())
    T = max(t.shape[1] for t in targets)
    pred = torch.cat([F.pad(p, (0, T - p.shape[1]), value=pad) for p in preds])  # (N, T)
    target = torch.cat([F.pad(t, (0, T - t.shape[1]), value=pad) for t in targets])  # (N, T)
    return {"token_acc": token_accuracy(pred, target, pad), "seq_acc": sequence_accuracy(pred, target, pad)}


def train_seq2seq(model, train_data, epochs: int, lr: float = 2e-3, batch_size: int = 64, clip: float | None = 1.0,
                  schedule: str = "onecycle", teacher_forcing: float | tuple[float, float, float] = 1.0,
                  eval_data=None, seed: int = 0, device=None, progress: bool = True,
                  weight_decay: float = 0.0) -> History:
    """Train a seq2seq model (LSTM or transformer) with Adam, cross-entropy (pad ignored) and gradient clipping.

    Built by hand in notebook 01 (section 5). Each epoch visits ``train_data`` once in a fresh order
    (:func:`attnlib.batches` with ``seed + epoch``).

    Args:
        schedule: ``"onecycle"`` (OneCycleLR, peak ``lr``) or ``"constant"``.
        teacher_forcing: a constant ratio, or ``(start, decay, floor)`` for
            :func:`teacher_forcing_ratio` per epoch (the LSTM only: a transformer always reads the gold target).
        eval_data: if given, greedy ``eval_token_acc`` / ``eval_seq_acc`` are logged each epoch.
        seed: seeds the shuffling (``seed + epoch``) and PyTorch's global generator (sampling, dropout).
        weight_decay: 0 uses Adam; more uses AdamW with this decoupled weight decay.

    Returns a History with ``epoch``, ``loss``, ``token_acc`` (training, teacher-forced inputs), ``lr``,
    ``teacher_forcing`` and the eval metrics. The model is left in eval mode.
    """
    import inspect

    from .data import batches

    if schedule not in ("onecycle", "constant"):
        raise ValueError(f"schedule must be 'onecycle' or 'constant', got {schedule!r}")
    if teacher_forcing != 1.0 and "teacher_forcing" not in inspect.signature(model.forward).parameters:
        raise ValueError(f"{type(model).__name__} always reads the gold target (teacher forcing 1.0); "
                         f"got teacher_forcing={teacher_forcing!r}")
    torch.manual_seed(seed)
    device = device or next(model.parameters()).device
    model.to(device)
    pad = train_data.tgt_vocab.pad_id
    # fused=True: the whole update in one kernel for all parameters (the same formula as a Python loop over them,
    # rounded in another order; 10-15% faster for the small transformers of the series)
    optimizer = (torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, fused=True) if weight_decay
                 else torch.optim.Adam(model.parameters(), lr=lr, fused=True))
    steps = -(-len(train_data) // batch_size)
    scheduler = (torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps)
                 if schedule == "onecycle" else None)
    history = History()
    bar = progress_bar(range(1, epochs + 1), desc="training", disable=not progress)
    for epoch in bar:
        ratio = (teacher_forcing_ratio(epoch - 1, *teacher_forcing) if isinstance(teacher_forcing, tuple)
                 else float(teacher_forcing))
        sampling = {} if ratio == 1.0 else {"teacher_forcing": ratio}
        model.train()
        total_loss, correct, count = (torch.zeros((), device=device) for _ in range(3))
        for b in batches(train_data, batch_size, shuffle=True, seed=seed + epoch, device=device):
            logits = model(b.src, b.tgt, b.src_key_padding_mask, **sampling)  # (B, T, V)
            loss = sequence_loss(logits, b.tgt, pad)
            optimizer.zero_grad()
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            real = b.tgt != pad
            total_loss += loss.detach() * real.sum()
            correct += ((logits.detach().argmax(-1) == b.tgt) & real).sum()
            count += real.sum()
        metrics = {"loss": float(total_loss / count), "token_acc": float(correct / count)}
        if eval_data is not None:
            ev = evaluate(model, eval_data, device=device)
            metrics.update(eval_token_acc=ev["token_acc"], eval_seq_acc=ev["seq_acc"])
        history.log(epoch=epoch, **metrics, lr=optimizer.param_groups[0]["lr"], teacher_forcing=ratio)
        bar.set_postfix({k: f"{v:.3f}" for k, v in metrics.items()})
    model.eval()
    return history


# ------------------------------------------------------------------ per-position models: a fresh batch every step

def train_steps(model, make_batch: Callable, steps: int, lr: float = 2e-3, batch_size: int = 64, seed: int = 0,
                schedule: str = "cosine", warmup: int = 0, mask: torch.Tensor | None = None,
                ignore_index: int = -100, desc: str = "training", progress: bool = True,
                leave: bool = True) -> History:
    """Train a model that makes one prediction per position, on a fresh batch at every step (AdamW, cross-entropy).

    Built in notebook 05 (section 5) and used by notebooks 06, 07 (warm-up: section 6), 11 and 12. At each step
    ``make_batch(batch_size, generator)`` returns ``(tokens, targets)`` or ``(tokens, targets, real)``;
    the model is called as ``model(tokens)``, with ``mask=mask`` when a mask is given (e.g. a causal
    ``(L, L)`` mask) and with ``key_padding_mask=real`` when the batch has one. The logits hold the same
    number of classes for every target: ``(B, L, C)`` against targets ``(B, L)``, or ``(B, L, k * C)``
    against ``(B, L, k)`` for k targets per position. Targets equal to ``ignore_index`` get no loss.

    Args:
        seed: seeds the batches' ``torch.Generator`` (the model's initial weights and its dropout come
            from PyTorch's global generator: seed it when you build the model).
        schedule: ``"cosine"`` (from ``lr`` down to 0 over ``steps``) or ``"constant"``.
        warmup: with the cosine schedule, a linear ramp over the first ``warmup`` steps (notebook 07).

    Returns a History with, per step: ``step``, ``loss``, ``token_acc`` and ``seq_acc`` on that step's
    batch (over the targets that count) and ``lr``. The model is left in eval mode.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule must be 'cosine' or 'constant', got {schedule!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a number of steps (an int >= 0), got {warmup!r}")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # one kernel for all parameters

    def factor(s: int) -> float:  # the learning rate at step s, as a share of lr
        ramp = min(1.0, (s + 1) / warmup) if warmup else 1.0
        return ramp * 0.5 * (1 + math.cos(math.pi * s / steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor) if schedule == "cosine" else None
    history = History()
    model.train()
    for step in progress_bar(range(steps), desc=desc, leave=leave, disable=not progress):
        tokens, targets, *real = make_batch(batch_size, generator)  # a fresh batch every step
        kwargs = {} if mask is None else {"mask": mask}
        if real:
            kwargs["key_padding_mask"] = real[0].to(device)
        targets = targets.to(device)
        logits = model(tokens.to(device), **kwargs)  # (B, L, C) or (B, L, k * C)
        if logits.numel() % targets.numel():
            raise ValueError(f"logits has shape {shape_of(logits)} and targets {shape_of(targets)}: the logits must "
                             "hold the same number of classes for every target")
        loss = F.cross_entropy(logits.reshape(targets.numel(), -1), targets.reshape(-1), ignore_index=ignore_index)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        with torch.no_grad():
            hit = logits.reshape(*targets.shape, -1).argmax(-1) == targets  # (B, L) or (B, L, k)
            counts = targets != ignore_index
            history.log(step=step + 1, loss=loss.item(), lr=optimizer.param_groups[0]["lr"],
                        token_acc=(hit & counts).sum().item() / max(1, counts.sum().item()),
                        seq_acc=(hit | ~counts).flatten(1).all(1).float().mean().item())
    model.eval()
    return history
