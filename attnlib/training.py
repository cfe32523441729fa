"""Training helpers: reproducibility, device choice, progress bars, seq2seq metrics, a History
of metrics, and a small training loop for :class:`attnlib.Seq2Seq` (Adam + one-cycle LR + clipping)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

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


def teacher_forcing_ratio(epoch: int, start: float = 1.0, decay: float = 0.9, floor: float = 0.0) -> float:
    """Scheduled sampling: ``max(floor, start * decay ** epoch)`` (``epoch`` counts from 0)."""
    if not (0.0 <= floor <= 1.0 and 0.0 <= start <= 1.0 and 0.0 <= decay <= 1.0):
        raise ValueError(f"start, decay and floor must lie in [0, 1], got start={start}, decay={decay}, floor={floor}")
    return max(floor, start * decay**epoch)


# ------------------------------------------------------------------ history

class History:
    """Metrics per epoch, as a dict of lists: ``h.log(epoch=1, loss=0.3)``, then ``h["loss"]``."""

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

    def __repr__(self) -> str:
        last = ", ".join(f"{k}={v[-1]:.4g}" for k, v in self._data.items() if k != "epoch")
        return f"History({len(self._data.get('epoch', []))} epochs: {last})"

    def plot(self, keys: Sequence[str] | str | None = None, ax=None):
        """Draw curves against ``epoch`` with :func:`attnlib.plot_curves`.

        With ``keys`` or ``ax``: those metrics (default: all but ``epoch``) on one Axes, which
        is returned. Without either: the losses on the left and the accuracies on the right
        (panels with no such metric are left out); returns the Figure.
        """
        from .plotting import plot_curves

        if keys is not None or ax is not None:
            keys = [keys] if isinstance(keys, str) else keys
            return plot_curves(self, keys=keys or [k for k in self._data if k != "epoch"], ax=ax)
        import matplotlib.pyplot as plt

        panels = [(title, [k for k in self._data if word in k]) for title, word in (("loss", "loss"), ("accuracy", "acc"))]
        panels = [(title, keys) for title, keys in panels if keys]
        if not panels:
            raise ValueError(f"no metric named like a loss or an accuracy; logged: {sorted(self._data)}; pass keys=[...]")
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
        for a, (title, keys) in zip(axes[0], panels):
            plot_curves(self, keys=keys, ax=a, title=title)
        fig.tight_layout()
        return fig


# ------------------------------------------------------------------ seq2seq training

def evaluate_seq2seq(model, data, batch_size: int = 256, device=None, beam_size: int = 1,
                     length_penalty: float = 1.0) -> dict[str, float]:
    """Token and whole-sequence accuracy of free-running decoding (greedy, or beam search).

    Returns ``{"token_acc": ..., "seq_acc": ...}`` over all of ``data`` (a Seq2SeqData).
    """
    from .data import batches
    from .seq2seq import beam_search, greedy_decode

    device = device or next(model.parameters()).device
    preds, targets = [], []
    for b in batches(data, batch_size, shuffle=False, device=device):
        T = b.tgt.shape[1]
        if beam_size == 1:
            pred, _ = greedy_decode(model, b.src, b.src_mask, max_len=T)
        else:
            pred, _ = beam_search(model, b.src, b.src_mask, beam_size=beam_size, max_len=T,
                                  length_penalty=length_penalty)
        preds.append(_align(pred, b.tgt).cpu())
        targets.append(b.tgt.cpu())
    pad = data.tgt_vocab.pad_id
    T = max(t.shape[1] for t in targets)
    pred = torch.cat([F.pad(p, (0, T - p.shape[1]), value=pad) for p in preds])
    target = torch.cat([F.pad(t, (0, T - t.shape[1]), value=pad) for t in targets])
    return {"token_acc": token_accuracy(pred, target, pad), "seq_acc": sequence_accuracy(pred, target, pad)}


def train_seq2seq(model, train_data, epochs: int, lr: float = 2e-3, batch_size: int = 64, clip: float | None = 1.0,
                  schedule: str = "onecycle", teacher_forcing: float | tuple[float, float, float] = 1.0,
                  eval_data=None, seed: int = 0, device=None, progress: bool = True) -> History:
    """Train a :class:`attnlib.Seq2Seq` with Adam, cross-entropy (pad ignored) and gradient clipping.

    Args:
        schedule: ``"onecycle"`` (OneCycleLR, peak ``lr``) or ``"constant"``.
        teacher_forcing: a constant ratio, or ``(start, decay, floor)`` for
            :func:`teacher_forcing_ratio` per epoch.
        eval_data: if given, greedy ``eval_token_acc`` / ``eval_seq_acc`` are logged each epoch.
        seed: seeds the shuffling (``seed + epoch``) and PyTorch's generator (sampling, dropout).

    Returns a History with ``epoch``, ``loss``, ``token_acc`` (training, teacher-forced
    inputs), ``lr``, ``teacher_forcing`` and the eval metrics.
    """
    from .data import batches

    if schedule not in ("onecycle", "constant"):
        raise ValueError(f"schedule must be 'onecycle' or 'constant', got {schedule!r}")
    torch.manual_seed(seed)
    device = device or next(model.parameters()).device
    model.to(device)
    pad = train_data.tgt_vocab.pad_id
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = -(-len(train_data) // batch_size)
    scheduler = (torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=epochs * steps)
                 if schedule == "onecycle" else None)
    history = History()
    bar = progress_bar(range(1, epochs + 1), desc="training", disable=not progress)
    for epoch in bar:
        ratio = (teacher_forcing_ratio(epoch - 1, *teacher_forcing) if isinstance(teacher_forcing, tuple)
                 else float(teacher_forcing))
        model.train()
        total_loss = torch.zeros((), device=device)
        correct = torch.zeros((), device=device)
        count = torch.zeros((), device=device)
        for b in batches(train_data, batch_size, shuffle=True, seed=seed + epoch, device=device):
            logits, _ = model(b.src, b.src_mask, b.tgt, teacher_forcing=ratio)
            loss = F.cross_entropy(logits.flatten(0, 1), b.tgt.flatten(), ignore_index=pad)
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
            ev = evaluate_seq2seq(model, eval_data, device=device)
            metrics.update(eval_token_acc=ev["token_acc"], eval_seq_acc=ev["seq_acc"])
        history.log(epoch=epoch, **metrics, lr=optimizer.param_groups[0]["lr"], teacher_forcing=ratio)
        bar.set_postfix({k: f"{v:.3f}" for k, v in metrics.items()})
    return history
