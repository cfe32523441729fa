"""Checking our modules against PyTorch's own: copy weights and prove the copy, compare activations by value.

Used by every ``copy_from_torch`` in attnlib (MultiHeadAttention, TransformerBlock,
TransformerDecoderBlock), so that they all copy the same way: check what can be checked before
copying, copy, run both modules on a probe input, and undo the copy if the outputs differ.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .runtime import eval_mode

PROBE_TOL = 1e-4  # relative: after a copy, the two modules' outputs on the probe differ by at most this


def same_activation(theirs: Callable, mine: Callable) -> tuple[bool, float]:
    """Whether two activations compute the same values on [-6, 6], and the largest difference.

    Compares what they do, not what they are called: ``nn.GELU(approximate="tanh")`` is a GELU
    by name but differs from the exact one by up to about 5e-4.
    """
    x = torch.linspace(-6.0, 6.0, 1201)
    gap = (theirs(x) - mine(x)).abs().max().item()
    return gap <= 1e-6, gap


def activation_name(fn: Callable) -> str:
    """How to call an activation in a message: a module's repr (``GELU(approximate='tanh')``) or a function's name."""
    return repr(fn) if isinstance(fn, nn.Module) else getattr(fn, "__name__", repr(fn))


@torch.no_grad()
def copy_checked(ours: nn.Module, theirs: nn.Module, copy: Callable[[], None],
                 run_ours: Callable[[torch.Tensor], torch.Tensor], run_theirs: Callable[[torch.Tensor], torch.Tensor],
                 d_model: int, what: str) -> None:
    """Run ``copy()``, then compare both modules' outputs on a probe ``(2, 5, d_model)`` in eval mode.

    Copying weights can succeed while the two modules compute different things (a setting
    attnlib does not reproduce); then the copy is undone and a ValueError names the gap. The
    probe comes from its own generator, never the global one, and has ``theirs``' dtype and device.
    """
    ref = next(theirs.parameters())
    probe = torch.randn(2, 5, d_model, generator=torch.Generator().manual_seed(0)).to(ref)
    saved = {k: v.clone() for k, v in ours.state_dict().items()}
    with eval_mode(ours, theirs):
        copy()
        mine, other = run_ours(probe), run_theirs(probe)
    gap = (mine - other).abs().max().item() if mine.shape == other.shape else float("inf")
    if not gap <= PROBE_TOL * max(1.0, other.abs().max().item()):
        ours.load_state_dict(saved)
        raise ValueError(
            f"after copying, this module and the {what} give different outputs on a probe input "
            f"(largest difference {gap:.2e}); it has a setting attnlib does not reproduce, so nothing was copied"
        )
