"""Toy sequence-to-sequence tasks with known answers, a vocabulary, and a batch iterator.

Every maker takes a ``seed`` and uses its own ``random.Random(seed)``: the same seed
gives identical data, and the global random state is never touched. One call returns a
:class:`Seq2SeqData` whose tensors are padded and ready for training.

Layout of the tensors (``pad_id = 0``, ``bos_id = 1``, ``eos_id = 2``):

* ``src`` ``(N, Ls)``: source tokens, then ``<eos>``, then ``<pad>``.
* ``tgt`` ``(N, Lt)``: target tokens, then ``<eos>``, then ``<pad>``. The model adds
  ``<bos>`` in front of the decoder input itself (see :class:`attnlib.Seq2Seq`).

There is no ``<bos>`` in the source, so position ``i`` of ``src`` is character/token
``i`` of the raw input; the date spans use these positions.
"""
from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Sequence

import torch

from ._checks import shape_of

SPECIALS = ("<pad>", "<bos>", "<eos>")


class Vocab:
    """Token <-> id mapping. The specials come first, in the order given: with the default
    ``("<pad>", "<bos>", "<eos>")``, ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2.

    ``specials`` must contain ``"<pad>"``, ``"<bos>"`` and ``"<eos>"`` (in any order, with any
    others); ``pad_id``, ``bos_id`` and ``eos_id`` are their positions. Tokens may be ints or
    characters; they are stored as strings (``3`` and ``"3"`` are the same token). Order is
    the order given, duplicates dropped; a token may not be spelled like a special.
    """

    def __init__(self, tokens: Iterable[object], specials: Sequence[str] = SPECIALS):
        specials = tuple(specials)
        missing = [s for s in SPECIALS if s not in specials]
        if missing:
            raise ValueError(f"specials must include {SPECIALS} (in any order), got {specials}; missing {missing}")
        if len(set(specials)) != len(specials):
            raise ValueError(f"specials must not repeat, got {specials}")
        tokens = list(dict.fromkeys(str(t) for t in tokens))
        clash = [t for t in tokens if t in specials]
        if clash:
            raise ValueError(f"the tokens {clash} are spelled like specials {specials}; rename them")
        self.itos: list[str] = [*specials, *tokens]
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id = (self.stoi[s] for s in SPECIALS)
        self.specials = specials

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self.itos[:12]}{' ...' if len(self) > 12 else ''})"

    def encode(self, seq: Iterable[object], add_bos: bool = False, add_eos: bool = True) -> list[int]:
        """Ids of the tokens of ``seq`` (a string is split into characters)."""
        ids = [self.bos_id] if add_bos else []
        for t in seq:
            key = str(t)
            if key not in self.stoi:
                raise ValueError(f"token {key!r} is not in the vocabulary ({len(self)} tokens: {self.itos})")
            ids.append(self.stoi[key])
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int] | torch.Tensor, strip: bool = True) -> list[str]:
        """Tokens of ``ids``. With ``strip``: stop at the first ``<eos>``, drop ``<pad>`` and ``<bos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if strip and i == self.eos_id:
                break
            if strip and i in (self.pad_id, self.bos_id):
                continue
            out.append(self.itos[i])
        return out


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0) -> torch.Tensor:
    """A ``(N, max_len)`` long tensor of the id lists, right-padded with ``pad_id``."""
    out = torch.full((len(seqs), max((len(s) for s in seqs), default=0)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


@dataclass
class Seq2SeqData:
    """A toy data set: padded id tensors, vocabularies and the raw examples.

    Attributes:
        src: ``(N, Ls)`` source ids (tokens, ``<eos>``, padding).
        tgt: ``(N, Lt)`` target ids (tokens, ``<eos>``, padding).
        src_vocab, tgt_vocab: the vocabularies (the same object when shared).
        src_raw, tgt_raw: the examples before encoding (strings or lists of tokens).
        spans: for dates, one dict per example ``{"year"|"month"|"day": (start, end)}``,
            half-open positions in ``src`` (``src_raw[i][start:end]`` is the field).
    """

    src: torch.Tensor
    tgt: torch.Tensor
    src_vocab: Vocab
    tgt_vocab: Vocab
    src_raw: list
    tgt_raw: list
    spans: list[dict[str, tuple[int, int]]] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return self.src.shape[0]

    def __repr__(self) -> str:
        return (f"Seq2SeqData({len(self)} examples, src {tuple(self.src.shape)}, tgt {tuple(self.tgt.shape)}, "
                f"{len(self.src_vocab)} source / {len(self.tgt_vocab)} target tokens)")

    @property
    def src_mask(self) -> torch.Tensor:
        """``(N, Ls)`` bool, True at real source positions (including ``<eos>``)."""
        return self.src != self.src_vocab.pad_id

    def subset(self, index: Sequence[int] | slice | torch.Tensor) -> "Seq2SeqData":
        """The examples at ``index`` (padding trimmed to the longest kept example)."""
        idx = torch.arange(len(self))[index] if isinstance(index, slice) else torch.as_tensor(index, dtype=torch.long)
        src, tgt = self.src[idx], self.tgt[idx]
        ls = int((src != self.src_vocab.pad_id).sum(1).max()) if len(idx) else 0
        lt = int((tgt != self.tgt_vocab.pad_id).sum(1).max()) if len(idx) else 0
        keep = idx.tolist()
        return Seq2SeqData(
            src[:, :ls], tgt[:, :lt], self.src_vocab, self.tgt_vocab,
            [self.src_raw[i] for i in keep], [self.tgt_raw[i] for i in keep],
            None if self.spans is None else [self.spans[i] for i in keep],
        )

    def split(self, n_first: int) -> tuple["Seq2SeqData", "Seq2SeqData"]:
        """``(first n_first examples, the rest)``, e.g. a train / test split."""
        if not 0 <= n_first <= len(self):
            raise ValueError(f"n_first must be between 0 and {len(self)}, got {n_first}")
        return self.subset(slice(0, n_first)), self.subset(slice(n_first, len(self)))


def _build(src_raw, tgt_raw, src_vocab, tgt_vocab, spans=None) -> Seq2SeqData:
    src = pad_sequences([src_vocab.encode(s) for s in src_raw], src_vocab.pad_id)
    tgt = pad_sequences([tgt_vocab.encode(t) for t in tgt_raw], tgt_vocab.pad_id)
    return Seq2SeqData(src, tgt, src_vocab, tgt_vocab, list(src_raw), list(tgt_raw), spans)


def _check_n_length(n: int, length: int | tuple[int, int]) -> tuple[int, int]:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    lo, hi = (length, length) if isinstance(length, int) else tuple(length)
    if not 1 <= lo <= hi:
        raise ValueError(f"length must be a positive int or a (min, max) pair with min <= max, got {length!r}")
    return lo, hi


def _random_sequences(n, length, values, seed) -> list[list[int]]:
    lo, hi = _check_n_length(n, length)
    rng = random.Random(seed)
    return [[rng.choice(values) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def make_reversal(n: int, length: int | tuple[int, int], vocab_size: int = 10, seed: int = 0) -> Seq2SeqData:
    """Reverse a sequence of tokens ``0 .. vocab_size-1``. ``length``: an int or ``(min, max)``."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    seqs = _random_sequences(n, length, list(range(vocab_size)), seed)
    vocab = Vocab(range(vocab_size))
    return _build(seqs, [s[::-1] for s in seqs], vocab, vocab)


def make_copy(n: int, length: int | tuple[int, int], vocab_size: int = 10, seed: int = 0) -> Seq2SeqData:
    """Copy a sequence of tokens ``0 .. vocab_size-1`` unchanged."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    seqs = _random_sequences(n, length, list(range(vocab_size)), seed)
    vocab = Vocab(range(vocab_size))
    return _build(seqs, [list(s) for s in seqs], vocab, vocab)


def make_sorting(n: int, length: int | tuple[int, int], low: int = 2, high: int = 19, seed: int = 0) -> Seq2SeqData:
    """Sort integers drawn uniformly from ``low .. high`` (inclusive) into ascending order."""
    if low > high:
        raise ValueError(f"low must be <= high, got low={low}, high={high}")
    seqs = _random_sequences(n, length, list(range(low, high + 1)), seed)
    vocab = Vocab(range(low, high + 1))
    return _build(seqs, [sorted(s) for s in seqs], vocab, vocab)


# ------------------------------------------------------------------ dates

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
    _check_n_length(n, 1)
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
    return _build(src_raw, tgt_raw, src_vocab, tgt_vocab, spans)


# ------------------------------------------------------------------ batches

class Batch(NamedTuple):
    """One mini-batch: ``src`` ``(B, Ls)``, ``src_mask`` ``(B, Ls)`` bool, ``tgt`` ``(B, Lt)``, ``index`` ``(B,)``."""

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt: torch.Tensor
    index: torch.Tensor


def batches(
    data: Seq2SeqData,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    device: torch.device | str | None = None,
) -> Iterator[Batch]:
    """Iterate over ``data`` in mini-batches, padding trimmed to each batch's longest example.

    With ``shuffle`` the order comes from ``torch.Generator().manual_seed(seed)``, so pass
    a different seed each epoch (e.g. ``seed + epoch``) for a fresh order.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if data.src.shape[0] != data.tgt.shape[0]:
        raise ValueError(f"src has shape {shape_of(data.src)} but tgt has shape {shape_of(data.tgt)}; N must match")
    n = len(data)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)) if shuffle else torch.arange(n)
    src_len = (data.src != data.src_vocab.pad_id).sum(1)
    tgt_len = (data.tgt != data.tgt_vocab.pad_id).sum(1)
    for i in range(0, n, batch_size):
        idx = order[i : i + batch_size]
        ls, lt = int(src_len[idx].max()), int(tgt_len[idx].max())
        src = data.src[idx, :ls].to(device)
        yield Batch(src, src != data.src_vocab.pad_id, data.tgt[idx, :lt].to(device), idx)
