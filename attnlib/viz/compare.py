"""Two sets of attention maps side by side on one colour scale, with their difference.

``compare(a, b, query_tokens)`` returns an :class:`AttentionCompare`: three
:class:`~attnlib.viz.widgets.AttentionExplorer` views in a row (built in notebook 08, section 6), A and B on one fixed colour
scale (0 to the largest weight of either) and ``A - B`` on a diverging scale centred on 0.
Their ``layer``, ``head``, ``selected``, ``selected_key`` and ``view`` are linked
(traitlets.link, in Python), so picking a head, pinning a token or switching to the lines
view in one does it in all three. A and B also share ``scale`` (with ``vmin``, ``vmax``) and
``clip_sink`` and the per-map ranges the scales are computed from (the larger of the two inputs'
ranges), so whichever scale is picked in either menu, A and B stay on one scale. A and B may be two
inputs of the same length, two models, or a mean over a batch against one input.

Where widgets cannot run, the output carries one PNG with the three pictures stacked.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import ipywidgets
import numpy as np
import torch
import traitlets

from .._checks import to_numpy
from .export import EXPORT_MIME, PAYLOAD_MAX_BYTES, export_nbytes, export_state
from .render import static_html, static_png
from .widgets import AttentionExplorer

__all__ = ["AttentionCompare", "compare"]

LINKED = ("layer", "head", "selected", "selected_key", "view")  # all three views
SHARED_SCALE = ("vmin", "vmax", "scale", "clip_sink")  # A and B only: the difference has its own diverging scale


class AttentionCompare(ipywidgets.HBox):
    """``a``, ``b`` and ``diff`` explorers in a row (see :func:`compare`); read state from ``.a``."""

    def __init__(self, a: AttentionExplorer, b: AttentionExplorer, diff: AttentionExplorer) -> None:
        super().__init__([a, b, diff], layout=ipywidgets.Layout(flex_flow="row wrap", grid_gap="16px"))
        self.a, self.b, self.diff = a, b, diff
        self._links = [traitlets.link((a, n), (other, n)) for other in (b, diff) for n in LINKED]
        for src, dst in ((a, b), (b, a)):  # the three together, so vmin < vmax holds at every step
            src.observe(self._mirror(src, dst), names=list(SHARED_SCALE))

    @staticmethod
    def _mirror(src: AttentionExplorer, dst: AttentionExplorer) -> Any:
        """An observer of ``src`` that copies its scale, vmin and vmax into ``dst`` in one step."""
        def copy(change: dict) -> None:
            with dst.hold_sync(), dst.hold_trait_notifications():
                for name in SHARED_SCALE:
                    setattr(dst, name, getattr(src, name))
        return copy

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict] | None:
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        from PIL import Image

        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        states = [w.state for w in (self.a, self.b, self.diff)]
        pictures = [Image.open(io.BytesIO(static_png(s))).convert("RGB") for s in states]
        sheet = Image.new("RGB", (max(p.width for p in pictures), sum(p.height for p in pictures)), "white")
        y = 0
        for p in pictures:
            sheet.paste(p, (0, y))
            y += p.height
        buf = io.BytesIO()
        sheet.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(buf, format="PNG", optimize=True)
        data["image/png"] = buf.getvalue()
        data["text/html"] = static_html(data["image/png"], f"{self.a.title} | {self.b.title} | {self.diff.title}")
        data["text/plain"] = repr(self)
        data.pop(EXPORT_MIME, None)
        if sum(export_nbytes(s) for s in states) <= PAYLOAD_MAX_BYTES:
            data[EXPORT_MIME] = {"compare": [export_state(s) for s in states]}
        return data, metadata

    def __repr__(self) -> str:
        L, H, Lq, Lk = self.a._shape
        return (f"AttentionCompare({self.a.title!r} vs {self.b.title!r}: {L} layers x {H} heads, {Lq} x {Lk} tokens, "
                f"layer={self.a.layer}, head={self.a.head}, selected={self.a.selected})")


def compare(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray, query_tokens: Sequence[str],
            key_tokens: Sequence[str] | None = None, names: tuple[str, str] = ("A", "B"), **kwargs: Any) -> AttentionCompare:
    """Show attention maps ``a`` and ``b`` (each ``(layers, heads, Lq, Lk)``, or ``(Lq, Lk)`` for one map)
    on one colour scale, with ``a - b``. Tokens label both (the same positions); ``kwargs`` go to
    every AttentionExplorer (``layer``, ``head``, ``selected``, ``layer_names``, ``mask`` ...)."""
    wa, wb = to_numpy(a, "a"), to_numpy(b, "b")
    if wa.shape != wb.shape:
        raise ValueError(f"a has shape {tuple(wa.shape)} but b has shape {tuple(wb.shape)}; compare needs the same shape")
    if wa.ndim == 2:
        wa, wb = wa[None, None], wb[None, None]                              # (1, 1, Lq, Lk)
    if wa.ndim != 4:
        raise ValueError(f"a and b must be (layers, heads, Lq, Lk) or (Lq, Lk), got shape {tuple(wa.shape)}")
    if len(names) != 2 or not all(isinstance(n, str) for n in names):
        raise ValueError(f"names must be two strings, got {names!r}")
    for bad in ("scale", "raw_scores", "title"):
        if bad in kwargs:
            raise ValueError(f"compare sets {bad} itself (one shared scale; the difference is diverging), got {bad}=...")
    top = float(max(wa.max(), wb.max())) or 1.0
    ex_a = AttentionExplorer(wa, query_tokens, key_tokens, title=names[0], scale=(0.0, top), **kwargs)
    ex_b = AttentionExplorer(wb, query_tokens, key_tokens, title=names[1], scale=(0.0, top), **kwargs)
    with ex_a.hold_sync(), ex_b.hold_sync():  # one range per map for both, so every scale option is shared
        for name, pick in (("_map_lo", np.minimum), ("_map_hi", np.maximum), ("_map_rest", np.maximum)):
            both = pick(getattr(ex_a, name), getattr(ex_b, name)).tolist()
            setattr(ex_a, name, both), setattr(ex_b, name, both)
    ex_d = AttentionExplorer(wa - wb, query_tokens, key_tokens, title=f"{names[0]} minus {names[1]}",
                             raw_scores=True, scale="model", **kwargs)
    return AttentionCompare(ex_a, ex_b, ex_d)
