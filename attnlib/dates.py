"""The date-normalisation task of notebooks 02 and 10: one date written in ten formats, and where each field sits.

``make_dates`` returns a :class:`attnlib.Seq2SeqData` (character level, the layout of
:mod:`attnlib.data`) whose ``spans`` give the year, month and day positions of every source, so
that an attention map can be scored against the characters it should read.
"""
from __future__ import annotations

import datetime as dt
import random
from typing import Sequence

from ._checks import check_positive_int
from .data import Seq2SeqData, Vocab

MONTHS = ["january", "february", "march", "april", "may", "june", "july",
          "august", "september", "october", "november", "december"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _date_formats(d: dt.date) -> list[list[tuple[str, str | None]]]:
    """Each format as pieces ``(text, field)``, field in year/month/day or None."""
    month, y, m, day = MONTHS[d.month - 1], "year", "month", "day"
    yy = f"{d.year % 100:02d}"
    return [
        [(WEEKDAYS[d.weekday()] + ", ", None), (month, m), (" ", None), (str(d.day), day), (" ", None), (str(d.year), y)],
        [(f"{d.day:02d}", day), (".", None), (f"{d.month:02d}", m), (".", None), (yy, y)],
        [(month[:3].capitalize(), m), (" ", None), (str(d.day), day), (", ", None), (str(d.year), y)],
        [(str(d.day), day), (" ", None), (month, m), (" ", None), (str(d.year), y)],
        [(str(d.year), y), ("/", None), (f"{d.month:02d}", m), ("/", None), (f"{d.day:02d}", day)],
        [(f"{d.month:02d}", m), ("/", None), (f"{d.day:02d}", day), ("/", None), (str(d.year), y)],
        [(_ordinal(d.day), day), (" of ", None), (month.capitalize(), m), (", ", None), (str(d.year), y)],
        [(month.upper(), m), (" ", None), (f"{d.day:02d}", day), (" ", None), (str(d.year), y)],
        [(WEEKDAYS[d.weekday()][:3].capitalize() + " ", None), (str(d.day), day), (" ", None),
         (month[:3].capitalize(), m), (" ", None), (str(d.year), y)],
        [(str(d.year), y), ("-", None), (str(d.month), m), ("-", None), (str(d.day), day)],
    ]


#: How many input formats :func:`make_dates` draws from.
N_DATE_FORMATS = 10
DATE_FORMAT_EXAMPLES = ["".join(t for t, _ in f) for f in _date_formats(dt.date(2024, 3, 5))]


def format_date(d: dt.date, fmt: int) -> tuple[str, dict[str, tuple[int, int]]]:
    """The text of date ``d`` in format number ``fmt`` and the ``(start, end)`` span of each field.

    Two-digit years (format 1, ``05.03.24``) mean 1950-2049. The day span includes an
    ordinal suffix (``5th``); the month span is the month word (``march``, ``Mar``) or number.
    """
    if not 0 <= fmt < N_DATE_FORMATS:
        raise ValueError(f"fmt must be between 0 and {N_DATE_FORMATS - 1}, got {fmt}")
    text, spans = "", {}
    for piece, name in _date_formats(d)[fmt]:
        if name is not None:
            spans[name] = (len(text), len(text) + len(piece))
        text += piece
    return text, spans


def make_dates(
    n: int,
    seed: int = 0,
    start: dt.date = dt.date(1950, 1, 1),
    end: dt.date = dt.date(2049, 12, 31),
    formats: Sequence[int] | None = None,
) -> Seq2SeqData:
    """Date normalisation, character level: ``"tuesday, march 5 2024"`` -> ``"2024-03-05"``.

    Dates are uniform in ``[start, end]`` and formats uniform among ``formats``
    (default: all :data:`N_DATE_FORMATS`; see :data:`DATE_FORMAT_EXAMPLES`). The result's
    ``spans`` give the year/month/day positions in each source; its vocabularies cover
    every character any format can produce, so two calls share the same ids.
    """
    check_positive_int("n", n)
    if not (dt.date(1950, 1, 1) <= start <= end <= dt.date(2049, 12, 31)):
        raise ValueError(f"need 1950-01-01 <= start <= end <= 2049-12-31 (two-digit years), got {start}, {end}")
    formats = list(range(N_DATE_FORMATS)) if formats is None else list(formats)
    for f in formats:
        if not 0 <= f < N_DATE_FORMATS:
            raise ValueError(f"formats must be between 0 and {N_DATE_FORMATS - 1}, got {f}")
    rng = random.Random(seed)
    src_raw, tgt_raw, spans = [], [], []
    for _ in range(n):
        d = dt.date.fromordinal(rng.randint(start.toordinal(), end.toordinal()))
        text, span = format_date(d, rng.choice(formats))
        src_raw.append(text)
        tgt_raw.append(d.isoformat())
        spans.append(span)
    letters = "abcdefghijklmnopqrstuvwxyz"
    src_vocab = Vocab("0123456789" + letters + letters.upper() + " ,./-")
    tgt_vocab = Vocab("0123456789-")
    return Seq2SeqData.from_raw(src_raw, tgt_raw, src_vocab, tgt_vocab, spans)
