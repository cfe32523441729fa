"""Small input checks shared by the modules. Every error names what was expected and what arrived."""
from __future__ import annotations

import torch


def shape_of(x: torch.Tensor) -> tuple[int, ...]:
    """A tensor's shape as a plain tuple, so that messages read ``(2, 5, 64)``."""
    return tuple(x.shape)


def check_tensor(name: str, x: object, min_dim: int | None = None, ndim: int | None = None) -> None:
    """Raise ValueError unless ``x`` is a tensor with the stated number of dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, but it has shape {shape_of(x)} ({x.dim()}-D)")
    if min_dim is not None and x.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions, but it has shape {shape_of(x)}")


def check_bool_mask(mask: torch.Tensor, target: tuple[int, ...], target_desc: str) -> None:
    """Raise ValueError unless ``mask`` is boolean and broadcasts to ``target``.

    True means "may attend", as in the boolean ``attn_mask`` of
    ``torch.nn.functional.scaled_dot_product_attention``.
    """
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert with `mask.bool()` or build it with causal_mask/padding_mask"
        )
    try:
        broadcast = torch.broadcast_shapes(tuple(mask.shape), tuple(target))
    except RuntimeError:
        broadcast = None
    if broadcast != tuple(target):
        raise ValueError(
            f"mask has shape {shape_of(mask)} but it must broadcast to {target_desc} = {tuple(target)}"
        )
