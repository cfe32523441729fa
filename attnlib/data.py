"""Toy sequence-to-sequence tasks with known answers, a vocabulary, and a batch iterator.

Every maker takes a ``seed`` and uses its own ``random.Random(seed)``: the same seed
gives identical data, and the global random state is never touched. One call returns a
:class:`Seq2SeqData` whose tensors are padded and ready for training.

Layout of the tensors (``pad_id = 0``, ``bos_id = 1``, ``eos_id = 2``):

* ``src`` ``(N, Ls)``: source tokens, then ``<eos>``, then ``<pad>``.
* ``tgt`` ``(N, Lt)``: target tokens, then ``<eos>``, then ``<pad>``. The model adds
  ``<bos>`` in front of the decoder input itself (:func:`shift_right`).

There is no ``<bos>`` in the source, so position ``i`` of ``src`` is character/token
``i`` of the raw input; the date spans (:mod:`attnlib.dates`) use these positions.

The per-position tasks of the transformer notebooks (:func:`make_sort_batch`,
:func:`previous_digit_batch`) draw a fresh batch of tensors from a ``torch.Generator`` instead.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Sequence

import torch

from ._checks import check_positive_int, check_token_ids, shape_of

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

    def to_dict(self) -> dict[str, list[str]]:
        """Plain lists (``itos`` and ``specials``) that a checkpoint can store; :meth:`from_dict` reverses it."""
        return {"itos": list(self.itos), "specials": list(self.specials)}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocab":
        """The vocabulary that :meth:`to_dict` described."""
        return cls(d["itos"][len(d["specials"]):], specials=d["specials"])


def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """A decoder's input for the target ``tgt (B, T)``: ``<bos>``, then ``tgt`` without its last token, ``(B, T)``.

    With it, position t of the decoder predicts target token t from the target tokens before it
    (teacher forcing). Both seq2seq models build their decoder input with it.
    """
    check_token_ids("tgt", tgt)
    bos = tgt.new_full((tgt.shape[0], 1), bos_id)  # (B, 1)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T)


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
    def src_key_padding_mask(self) -> torch.Tensor:
        """``(N, Ls)`` bool, True at real source positions (including ``<eos>``), False at padding."""
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

    @classmethod
    def from_raw(cls, src_raw: Sequence, tgt_raw: Sequence, src_vocab: Vocab, tgt_vocab: Vocab,
                 spans: list[dict[str, tuple[int, int]]] | None = None) -> "Seq2SeqData":
        """Encode the examples (each with ``<eos>`` at its end) and pad them into a data set."""
        src = pad_sequences([src_vocab.encode(s) for s in src_raw], src_vocab.pad_id)  # (N, Ls)
        tgt = pad_sequences([tgt_vocab.encode(t) for t in tgt_raw], tgt_vocab.pad_id)  # (N, Lt)
        return cls(src, tgt, src_vocab, tgt_vocab, list(src_raw), list(tgt_raw), spans)

    def split(self, n_first: int) -> tuple["Seq2SeqData", "Seq2SeqData"]:
        """``(first n_first examples, the rest)``, e.g. a train / test split."""
        if not 0 <= n_first <= len(self):
            raise ValueError(f"n_first must be between 0 and {len(self)}, got {n_first}")
        return self.subset(slice(0, n_first)), self.subset(slice(n_first, len(self)))




def _check_n_length(n: int, length: int | tuple[int, int]) -> tuple[int, int]:
    check_positive_int("n", n)
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
    return Seq2SeqData.from_raw(seqs, [s[::-1] for s in seqs], vocab, vocab)


def make_copy(n: int, length: int | tuple[int, int], vocab_size: int = 10, seed: int = 0) -> Seq2SeqData:
    """Copy a sequence of tokens ``0 .. vocab_size-1`` unchanged."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    seqs = _random_sequences(n, length, list(range(vocab_size)), seed)
    vocab = Vocab(range(vocab_size))
    return Seq2SeqData.from_raw(seqs, [list(s) for s in seqs], vocab, vocab)


def make_sorting(n: int, length: int | tuple[int, int], low: int = 2, high: int = 19, seed: int = 0) -> Seq2SeqData:
    """Sort integers drawn uniformly from ``low .. high`` (inclusive) into ascending order."""
    if low > high:
        raise ValueError(f"low must be <= high, got low={low}, high={high}")
    seqs = _random_sequences(n, length, list(range(low, high + 1)), seed)
    vocab = Vocab(range(low, high + 1))
    return Seq2SeqData.from_raw(seqs, [sorted(s) for s in seqs], vocab, vocab)


# ------------------------------------------------------------------ batches

class Batch(NamedTuple):
    """One mini-batch: ``src`` ``(B, Ls)``, ``src_key_padding_mask`` ``(B, Ls)`` bool (True = a real token),
    ``tgt`` ``(B, Lt)``, ``index`` ``(B,)`` (the rows of the data set)."""

    src: torch.Tensor
    src_key_padding_mask: torch.Tensor
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
    check_positive_int("batch_size", batch_size)
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


# ------------------------------------------------------------------ per-position tasks: a fresh batch per call

def _generator(generator: torch.Generator | int) -> torch.Generator:
    """``generator`` itself, or a new one seeded with it when it is an int."""
    if isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, int) and not isinstance(generator, bool):
        return torch.Generator().manual_seed(generator)
    raise ValueError(f"generator must be a torch.Generator or an int seed, got {type(generator).__name__}")


def make_sort_batch(n: int, generator: torch.Generator | int, min_len: int = 1, max_len: int = 12,
                    pad_id: int = 10, ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` inputs of digits to sort, as built in notebook 07 (section 4) and read again in notebook 08.

    Each input has a length drawn uniformly from ``min_len..max_len`` and digits drawn from its own
    random palette of 1 to 10 different digits, so that repeated digits are common (with uniform
    digits, a run of six equal digits among twelve would be rare). Inputs are right-padded with
    ``pad_id`` to ``max_len``. The draws come from ``generator`` (a ``torch.Generator``, which
    advances, or an int seed); the global random state is never touched.

    Returns ``tokens (n, max_len)``, ``targets (n, max_len)``: the sorted digits, ``ignore_index``
    at the pads (no loss there), and ``real (n, max_len)``: bool, True at a real token (a key
    padding mask).
    """
    g = _generator(generator)
    check_positive_int("n", n)
    check_positive_int("min_len", min_len)
    if max_len < min_len:
        raise ValueError(f"max_len must be at least min_len, got min_len={min_len} and max_len={max_len}")
    if pad_id < 10:
        raise ValueError(f"pad_id must be 10 or more (it must sort after every digit), got {pad_id}")
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)  # (n,)
    palette_size = torch.randint(1, 11, (n,), generator=g)  # (n,) how many different digits each input may use
    palettes = torch.rand(n, 10, generator=g).argsort(dim=1)  # (n, 10) a random order of 0-9 per input
    picks = (torch.rand(n, max_len, generator=g) * palette_size[:, None]).long()  # (n, max_len), < palette_size
    digits = palettes.gather(1, picks)  # (n, max_len)
    real = torch.arange(max_len)[None, :] < lengths[:, None]  # (n, max_len), True = a real token
    tokens = digits.masked_fill(~real, pad_id)
    targets = tokens.sort(dim=1).values.masked_fill(~real, ignore_index)  # the pads sort last; no loss there
    return tokens, targets, real


def previous_digit_batch(n: int, generator: torch.Generator | int, length: int = 12,
                         ignore_index: int = -100) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of ``length`` uniform digits; the target at each position is the digit before it.

    Introduced in notebook 06 (section 4) and used again in notebook 12: a task that only positions can
    solve. Position 0 has no previous digit: its target is ``ignore_index``. The draws come from
    ``generator`` (a ``torch.Generator`` or an int seed). Returns ``tokens (n, length)`` and
    ``targets (n, length)``.
    """
    g = _generator(generator)
    check_positive_int("n", n)
    check_positive_int("length", length)
    tokens = torch.randint(0, 10, (n, length), generator=g)  # (n, length)
    targets = torch.cat([torch.full((n, 1), ignore_index), tokens[:, :-1]], dim=1)  # (n, length)
    return tokens, targets
