"""The small layers every transformer block uses beside attention: the feed-forward network and its normalisation.

* :class:`FeedForward`: ``Linear -> ReLU or GELU -> Linear``, the same for every position (built in
  notebook 07, section 1; the block of GPT-2 and BERT).
* :class:`RMSNorm`: LayerNorm without the mean and the bias, as in Llama and SmolLM2 (notebook 13).
* :class:`SwiGLU`: the gated feed-forward of Llama and SmolLM2 (notebook 13).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor, shape_of

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}  # GELU is the exact (erf) form


def _positive(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


class FeedForward(nn.Module):
    """Position-wise feed-forward: ``linear2(dropout(activation(linear1(x))))``, the same for every position.

    ``x (..., d_model) -> (..., d_model)``; ``activation`` is "relu" or "gelu" (exact).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        _positive(d_model=d_model, d_ff=d_ff)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.activation = _ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (..., d_model)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight`` over the last dimension: no mean subtracted, no bias.

    Equal to ``torch.nn.RMSNorm(d_model, eps)``. The statistic is computed in float32 whatever the
    input's dtype, then the result is cast back (what Llama's reference code does).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        _positive(d_model=d_model)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.d_model, self.eps = d_model, float(eps)
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, min_dim=1)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has shape {shape_of(x)} but its last dimension must be d_model={self.d_model}")
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)  # root mean square 1 per position
        return self.weight * x32.to(x.dtype)  # (..., d_model)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps:g}"


class SwiGLU(nn.Module):
    """The gated feed-forward of Llama: ``down(silu(gate(x)) * up(x))``.

    ``gate`` and ``up`` map d_model to d_ff, ``down`` maps d_ff back. The gate decides, per hidden
    unit and position, how much of ``up(x)`` passes (SiLU(z) = z · sigmoid(z)); three matrices
    instead of two, so models using it pick a d_ff of about 8/3 · d_model to keep the size.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        _positive(d_model=d_model, d_ff=d_ff)
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # (..., d_ff) gated, then (..., d_model)
