"""BERT's WordPiece tokenizer, written out: clean, split into words, then greedy longest-match sub-words.

Two stages, as in the original BERT code:

1. **Basic tokenization** turns raw text into words: drop control characters, map
   every kind of whitespace to a space, put spaces around CJK characters, lowercase,
   strip accents (Unicode NFD, then drop the combining marks) and split off every
   punctuation character, so ``"didn't"`` becomes ``did ' t``.
2. **WordPiece** splits each word into pieces of the vocabulary, longest match
   first, marking word-internal pieces with ``##`` (``"tokenizer"`` -> ``token ##izer``).
   A word that cannot be covered, or longer than 100 characters, becomes ``[UNK]``.

Only the standard library and torch are used; ``transformers`` serves as the reference in the tests.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Sequence

import torch

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    if ch in "\t\n\r":  # whitespace, not control, for our purposes
        return False
    return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # All non-letter/number ASCII symbols count as punctuation ("$", "^", "`"), as in BERT.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    """The CJK Unified Ideographs blocks (not Japanese kana or Korean hangul)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class TokenizerOutput(dict):
    """A dict with ``input_ids`` (B, L) long, ``attention_mask`` (B, L) long (1 = real token)
    and ``tokens`` (a list of B lists of strings, without padding). Keys are also attributes."""

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class WordPieceTokenizer:
    """BERT's uncased WordPiece tokenizer.

    Args:
        vocab: token -> id, in the order of ``vocab.txt`` (line i has id i).
        lowercase: lowercase and strip accents before splitting (the "uncased" models).
        max_input_chars_per_word: longer words become ``[UNK]`` without trying.
        model_max_length: the longest sequence (with [CLS] and [SEP]) the model accepts.

    ``tokenizer(["text", ...])`` returns a :class:`TokenizerOutput`, padded to the longest text.
    """

    def __init__(self, vocab: dict[str, int], lowercase: bool = True, max_input_chars_per_word: int = 100,
                 model_max_length: int = 512):
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise ValueError(f"the vocabulary must contain the special tokens {SPECIAL_TOKENS}; missing {missing}")
        self.vocab = dict(vocab)
        self.ids_to_tokens = {i: t for t, i in self.vocab.items()}
        self.lowercase = lowercase
        self.max_input_chars_per_word = max_input_chars_per_word
        self.model_max_length = model_max_length
        self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id = (
            self.vocab[t] for t in SPECIAL_TOKENS)

    @classmethod
    def from_vocab_file(cls, path: str | Path, **kwargs) -> "WordPieceTokenizer":
        """Read ``vocab.txt``: one token per line, the line number is the id."""
        lines = Path(path).read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the file ends with a newline
        return cls({tok.rstrip("\r"): i for i, tok in enumerate(lines)}, **kwargs)

    def __len__(self) -> int:
        return len(self.vocab)

    # ---- stage 1: text -> words -------------------------------------------------
    def _clean(self, text: str) -> str:
        out = []
        for ch in text:
            if ord(ch) in (0, 0xFFFD) or _is_control(ch):
                continue  # NUL, the replacement character and control characters vanish
            if _is_cjk(ord(ch)):
                out.append(f" {ch} ")  # every Chinese character is its own word
            else:
                out.append(" " if _is_whitespace(ch) else ch)
        return "".join(out)

    def _normalise(self, word: str) -> str:
        if not self.lowercase:
            return word
        word = unicodedata.normalize("NFD", word.lower())  # "é" -> "e" + combining acute accent
        return "".join(ch for ch in word if unicodedata.category(ch) != "Mn")  # drop the accents

    def basic_tokenize(self, text: str) -> list[str]:
        """Raw text -> words and punctuation marks, e.g. ``"Didn't!"`` -> ``['didn', "'", 't', '!']``."""
        text = unicodedata.normalize("NFC", self._clean(text))
        words: list[str] = []
        for word in text.split():
            current = ""
            for ch in self._normalise(word):
                if _is_punctuation(ch):
                    if current:
                        words.append(current)
                    words.append(ch)  # each punctuation character is a word of its own
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    # ---- stage 2: word -> pieces ------------------------------------------------
    def wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first split of one word, e.g. ``"tokenizer"`` -> ``['token', '##izer']``."""
        if len(word) > self.max_input_chars_per_word:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:  # try the longest candidate first, then shrink it
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return ["[UNK]"]  # no piece fits here: the whole word is unknown
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """Text -> WordPiece tokens (no [CLS]/[SEP]). Special tokens written in the text stay whole."""
        tokens: list[str] = []
        for chunk, is_special in self._split_special(text):
            if is_special:
                tokens.append(chunk)
            else:
                for word in self.basic_tokenize(chunk):
                    tokens.extend(self.wordpiece(word))
        return tokens

    @staticmethod
    def _split_special(text: str) -> list[tuple[str, bool]]:
        """Cut ``text`` around literal special tokens such as ``[SEP]``."""
        parts, start, i = [], 0, 0
        while i < len(text):
            hit = next((t for t in SPECIAL_TOKENS if text.startswith(t, i)), None)
            if hit:
                parts += [(text[start:i], False), (hit, True)]
                i = start = i + len(hit)
            else:
                i += 1
        parts.append((text[start:], False))
        return [(p, s) for p, s in parts if s or p]

    # ---- ids --------------------------------------------------------------------
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        return [self.vocab.get(t, self.unk_token_id) for t in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int] | torch.Tensor) -> list[str]:
        """Ids -> tokens; a tensor of ids is accepted too."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.ids_to_tokens[int(i)] for i in ids]

    def encode(self, text: str) -> list[int]:
        """One text -> ``[CLS] tokens [SEP]`` as ids."""
        return [self.cls_token_id, *self.convert_tokens_to_ids(self.tokenize(text)), self.sep_token_id]

    def __call__(self, texts: str | Sequence[str], max_length: int | None = None) -> TokenizerOutput:
        """Tokenize a batch and pad it to its longest member.

        Args:
            texts: one string or a list of strings.
            max_length: if given, cut every sequence to at most this many tokens
                (keeping the final [SEP]). Without it nothing is cut, and the model
                refuses sequences longer than its ``max_position_embeddings``.

        Returns:
            ``input_ids`` (B, L) and ``attention_mask`` (B, L), both ``torch.long``, plus
            ``tokens``: each text's tokens including [CLS] and [SEP], without padding.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, (list, tuple)) or not texts or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"texts must be a string or a non-empty list of strings, got {texts!r:.80}")
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length must be at least 2 (room for [CLS] and [SEP]), got {max_length}")
        rows = []
        for text in texts:
            ids = self.encode(text)
            if max_length is not None and len(ids) > max_length:
                ids = ids[: max_length - 1] + [self.sep_token_id]
            rows.append(ids)
        L = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), L), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), L), dtype=torch.long)
        for b, ids in enumerate(rows):
            input_ids[b, : len(ids)] = torch.tensor(ids)
            attention_mask[b, : len(ids)] = 1
        tokens = [self.convert_ids_to_tokens(r) for r in rows]
        return TokenizerOutput(input_ids=input_ids, attention_mask=attention_mask, tokens=tokens)

    def __repr__(self) -> str:
        return (f"WordPieceTokenizer(vocab_size={len(self)}, lowercase={self.lowercase}, "
                f"model_max_length={self.model_max_length})")
