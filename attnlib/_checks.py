"""Small input checks shared by the modules. Every error names what was expected and what arrived."""
from __future__ import annotations

from typing import Sequence

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


def _check_bool(mask: object, name: str) -> None:
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"{name} must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            "convert with `mask.bool()` or build it with causal_mask/padding_mask"
        )


def _fits(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Same rank, and every dimension equals the target's or is 1 (shared)."""
    return len(shape) == len(target) and all(m in (1, t) for m, t in zip(shape, target))


def check_bool_mask(mask: torch.Tensor, target: tuple[int, ...], target_desc: str, name: str = "mask") -> None:
    """Raise ValueError unless ``mask`` is bool, has the rank of ``target`` and each dimension equals
    the target's or is 1. No dimension is ever added on the left: a mask must say what it means.

    True means "may attend", as in the boolean ``attn_mask`` of
    ``torch.nn.functional.scaled_dot_product_attention``.
    """
    _check_bool(mask, name)
    if not _fits(tuple(mask.shape), tuple(target)):
        raise ValueError(
            f"{name} has shape {shape_of(mask)} but it must be {target_desc} = {tuple(target)} "
            f"({len(target)}-D, size 1 in a dimension it shares)"
        )


def check_attention_mask(
    mask: torch.Tensor, target: tuple[int, ...], names: Sequence[str], padding_arg: str | None = None
) -> None:
    """Raise ValueError unless ``mask`` is an unambiguous bool mask for attention scores of shape ``target``.

    Accepted: a 2-D ``(Lq, Lk)`` mask, shared by every batch entry and head, or a mask of the
    full rank of ``target`` (``names`` describes its dimensions, e.g. ``("B", "h", "Lq", "Lk")``);
    in both, a dimension may be 1 where the mask is shared. Any other rank is refused, because
    broadcasting would add dimensions on the left and silently misread it: a ``(B, Lk)`` padding
    mask would be read as ``(Lq, Lk)`` whenever ``B == Lq``. A 2-D mask is always read as
    ``(Lq, Lk)``, so a ``(B, Lk)`` padding mask must get its missing dimensions (or go to the
    ``padding_arg`` argument, when the caller has one).
    """
    _check_bool(mask, "mask")
    shape, target, n = shape_of(mask), tuple(target), len(target)
    if _fits(shape, target[-2:]) or _fits(shape, target):
        return
    full = f"({', '.join(names)}) = {target}"
    pair = f"(Lq, Lk) = {target[-2:]}"
    accepted = f"a 2-D {pair} mask" + (f" or a {n}-D {full} mask" if n > 2 else "")
    if mask.dim() in (2, n):
        problem = f"it must be {accepted}, with size 1 in a dimension it shares"
    else:
        problem = f"a {mask.dim()}-D mask is ambiguous here; it must be {accepted} (size 1 where shared)"
    hint = ""
    if mask.dim() < n:  # say how to add the dimensions this mask most likely lacks
        also = f" (or pass it as {padding_arg})" if padding_arg is not None else ""
        if mask.dim() == 1:
            hint = "one (Lk,) key mask for every query is mask[None, :]"
        elif mask.dim() == 2:
            hint = f"a (B, Lk) padding mask is mask[:, {'None, ' * (n - 2)}:]{also}"
        elif mask.dim() == 3 and n == 4:
            hint = "a (B, Lq, Lk) mask (or a (B, 1, Lk) padding mask) is mask[:, None]"
        else:
            hint = "insert each missing dimension with None"
        hint = "; add the missing dimensions explicitly: " + hint
    raise ValueError(f"mask has shape {shape} but {problem}{hint}")


def check_key_padding_mask(key_padding_mask: torch.Tensor, batch: int, key_len: int) -> None:
    """Raise ValueError unless ``key_padding_mask`` is a bool ``(B, Lk)`` tensor (True = a real token)."""
    _check_bool(key_padding_mask, "key_padding_mask")
    if shape_of(key_padding_mask) != (batch, key_len):
        raise ValueError(
            f"key_padding_mask has shape {shape_of(key_padding_mask)} but it must be (B, Lk) = {(batch, key_len)}, "
            "True for the real tokens"
        )


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Size:
    """Raise ValueError unless ``q (..., Lq, d_k)``, ``k (..., Lk, d_k)`` and ``v (..., Lk, d_v)`` fit
    together; return their broadcast leading (batch) dimensions."""
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"query has shape {shape_of(q)} but key has shape {shape_of(k)}; the last dimensions must match"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"key has shape {shape_of(k)} but value has shape {shape_of(v)}; "
            "they must have the same length (dimension -2)"
        )
    try:
        return torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of q {shape_of(q)}, k {shape_of(k)} and v {shape_of(v)} "
            "do not broadcast together"
        ) from None



def to_numpy(x: object, name: str):
    """A float64 NumPy copy of a tensor, an array or a nested list; a ValueError naming ``name`` otherwise."""
    import numpy as np

    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch.Tensor or a NumPy array of numbers, got {type(x).__name__}") from err


def check_positive_int(name: str, value: object) -> None:
    """Raise ValueError unless ``value`` is an int of at least 1 (a bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def check_fraction(name: str, value: object) -> None:
    """Raise ValueError unless ``value`` is a number in [0, 1] (a probability, a ratio)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")


def check_same_batch(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor) -> None:
    """Raise ValueError unless ``a`` and ``b`` have the same first (batch) dimension."""
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"{name_a} has shape {shape_of(a)} but {name_b} has shape {shape_of(b)}; the batch sizes must match"
        )


def check_token_ids(name: str, ids: object, ndim: int = 2) -> None:
    """Raise ValueError unless ``ids`` is an integer tensor of ``ndim`` dimensions (token ids)."""
    check_tensor(name, ids, ndim=ndim)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")


def check_right_padded(key_padding_mask: torch.Tensor, name: str = "key_padding_mask") -> None:
    """Raise ValueError unless every row of the bool ``(B, L)`` mask is its real tokens first, then its padding.

    A recurrent encoder reads the first ``mask.sum()`` tokens of each row (packed sequences), so a
    row with left padding or a gap would be read wrong; the message names the first such row.
    """
    lengths = key_padding_mask.sum(1, keepdim=True)  # (B, 1)
    prefix = torch.arange(key_padding_mask.shape[1], device=key_padding_mask.device)[None, :] < lengths  # (B, L)
    bad = (key_padding_mask != prefix).any(1).nonzero().flatten()
    if len(bad):
        row = int(bad[0])
        raise ValueError(
            f"row {row} of {name} is {key_padding_mask[row].int().tolist()}: the real tokens must come first, then "
            f"the padding (no left padding, no gaps), because the encoder reads the first mask.sum() tokens of each "
            f"row; {len(bad)} row(s) are not like that"
        )
