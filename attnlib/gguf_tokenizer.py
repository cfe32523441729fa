"""The tokenizer a GGUF file describes, built from its own vocabulary and merges with Hugging Face's
``tokenizers`` library (byte-level BPE is not re-implemented here), plus its chat template
(used in notebook 13, sections 1 and 4).

SmolLM2's file says ``tokenizer.ggml.model = gpt2`` (byte-level BPE: every byte of UTF-8 text is
first spelled as one of 256 printable characters, e.g. a space as ``Ġ``, then the 48,900 merges are
applied) and ``tokenizer.ggml.pre = smollm``: before BPE, every digit is split off on its own, then
text is cut by GPT-2's regular expression. That is how llama.cpp reads this file and how SmolLM2's
own tokenizer was trained (its vocabulary has no token with a digit next to anything else).

One known difference from ``transformers``' GGUF loader (5.23), which does not know ``smollm`` and
uses GPT-2's expression alone: a run of two or more spaces right before a digit. ``"x =  42"`` is
``x, Ġ=, ĠĠ, 4, 2`` here (and in llama.cpp) but ``x, Ġ=, Ġ, Ġ, 4, 2`` there. On every other text
the two give the same ids (tests/test_gguf_io.py checks both facts).
"""
from __future__ import annotations

from functools import cached_property
from typing import Sequence

CONTROL = 3  # tokenizer.ggml.token_type of a special token (<|im_start|>, <|im_end|>, ...); 1 = normal


class GGUFTokenizer:
    """Byte-level BPE from a GGUF's metadata: ``encode(text) -> ids``, ``decode(ids) -> text``.

    ``apply_chat_template(messages)`` renders the file's own chat template (Jinja, sandboxed) and
    encodes it. Special tokens written in the text (``<|im_start|>``) become their single id.
    ``backend`` is the underlying ``tokenizers.Tokenizer``.
    """

    def __init__(self, metadata: dict):
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

        kind, pre = metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.pre")
        if kind != "gpt2" or pre != "smollm":
            raise ValueError(f"this tokenizer reads byte-level BPE files with tokenizer.ggml.model = 'gpt2' and "
                             f"tokenizer.ggml.pre = 'smollm', got {kind!r} and {pre!r}")
        self.id_to_token: list[str] = list(metadata["tokenizer.ggml.tokens"])
        kinds = metadata["tokenizer.ggml.token_type"]
        merges = [tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]]  # "Ġ t" -> ("Ġ", "t")
        bpe = models.BPE({tok: i for i, tok in enumerate(self.id_to_token)}, merges)
        self.backend = Tokenizer(bpe)
        self.backend.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),  # "2024" -> 2, 0, 2, 4
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),  # GPT-2's split, bytes as characters
        ])
        self.backend.decoder = decoders.ByteLevel()
        self.special_ids = [i for i, k in enumerate(kinds) if k == CONTROL]
        self.backend.add_special_tokens([AddedToken(self.id_to_token[i], special=True, normalized=False)
                                         for i in self.special_ids])
        self.chat_template: str | None = metadata.get("tokenizer.chat_template")
        self.bos_id: int = int(metadata["tokenizer.ggml.bos_token_id"])  # <|im_start|> in SmolLM2's file
        # The file's eos id is also 1 (<|im_start|>); an assistant's turn really ends with <|im_end|>.
        self.eos_id: int = self.id_to_token.index("<|im_end|>") if "<|im_end|>" in self.id_to_token else \
            int(metadata["tokenizer.ggml.eos_token_id"])

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_token)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """``text`` -> token ids; ``add_bos=True`` puts ``bos_id`` first (the file asks llama.cpp to)."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        ids = self.backend.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos else ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Token ids (a list or a 1-D tensor) -> text."""
        ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids must lie in [0, {self.vocab_size - 1}], got {bad[:5]}")
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def tokens(self, ids: Sequence[int]) -> list[str]:
        """Each id as readable text on its own (``" world"``, not ``"Ġworld"``): labels for attention plots.
        A token holding part of a multi-byte character shows as the replacement character."""
        return [self.decode([i]) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]

    @cached_property
    def _template(self):
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        if self.chat_template is None:
            raise ValueError("this GGUF file has no tokenizer.chat_template in its metadata")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        return env.from_string(self.chat_template)

    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                            tokenize: bool = True) -> list[int] | str:
        """Render ``[{"role": "user", "content": "..."}, ...]`` with the file's template: the ids
        (``tokenize=True``) or the text. ``add_generation_prompt`` ends with the assistant's header,
        so that the model writes the answer next."""
        for m in messages:
            if not isinstance(m, dict) or not {"role", "content"} <= set(m):
                raise ValueError(f"each message must be a dict with 'role' and 'content', got {m!r}")
        text = self._template.render(messages=list(messages), add_generation_prompt=add_generation_prompt)
        return self.encode(text) if tokenize else text

    def __repr__(self) -> str:
        return f"GGUFTokenizer(vocab_size={self.vocab_size}, special={len(self.special_ids)}, bos_id={self.bos_id}, eos_id={self.eos_id})"
