"""attnlib: the small library behind the attention-notebooks series.

Masks are boolean and True means "may attend" (the convention of the boolean
``attn_mask`` of ``torch.nn.functional.scaled_dot_product_attention``). A mask is either
2-D ``(Lq, Lk)`` or has the full rank of what it masks, with size 1 where it is shared;
padding goes to its own ``key_padding_mask (B, Lk)`` argument (True = a real token).

Naming rule: attention modules follow ``nn.MultiheadAttention`` and take ``need_weights``
(they always return ``(out, weights)``, with ``weights`` None when it is False); blocks and
models return their output alone unless ``return_attention=True`` adds the maps.

``import attnlib`` is light: each name below is imported from its module the first time it
is used, so matplotlib (plots) and anywidget (widgets) load only when a plot or a widget is
asked for.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {  # module -> the public names it gives the package
    "attention": ["causal_mask", "padding_mask", "scaled_dot_product_attention", "masked_softmax", "sliding_window_mask"],
    "multihead": ["KVCache", "MultiHeadAttention"],
    "positional": ["LearnedPositionalEncoding", "RotaryEmbedding", "SinusoidalPositionalEncoding", "sinusoidal_encoding"],
    "layers": ["FeedForward", "RMSNorm", "SwiGLU"],
    "transformer": ["TransformerBlock", "TransformerEncoder", "TransformerSizes"],
    "tagger": ["TaggerConfig", "TransformerTagger"],
    "data": ["Batch", "Seq2SeqData", "Vocab", "batches", "make_copy", "make_reversal", "make_sort_batch",
             "make_sorting", "previous_digit_batch", "shift_right"],
    "dates": ["format_date", "make_dates"],
    "stats": ["Spread", "above", "apart", "spread", "verdict"],
    "rnn_attention": ["AdditiveAttention", "LuongAttention"],
    "seq2seq": ["AttentionDecoder", "Decoder", "DecoderState", "Encoder", "Seq2Seq", "load_seq2seq", "save_seq2seq"],
    "decoding": ["beam_search", "greedy_decode"],
    "runtime": ["eval_mode", "get_device", "progress_bar", "seed_everything"],
    "training": ["History", "evaluate", "sequence_accuracy", "sequence_loss", "teacher_forcing_ratio",
                 "token_accuracy", "train_seq2seq", "train_steps"],
    "parallel": ["fork_is_safe", "parallel_map"],
    "minilm": ["MiniLM", "MiniLMOutput", "WordPieceTokenizer", "load_minilm"],
    "gguf_io": ["GGUFFile", "unpermute_rope_rows"],
    "gguf_tokenizer": ["GGUFTokenizer"],
    "smollm2": ["SmolLM2", "SmolLM2Config", "load_smollm2"],
    "viz.plotting": ["plot_curves", "plot_heads", "plot_heatmap", "plot_history"],
    "viz.widgets": ["AttentionExplorer", "AttentionHeatmap"],
    "viz.compare": ["AttentionCompare", "compare"],
    "decoder": ["TransformerDecoderBlock"],
    "seq2seq_transformer": ["Seq2SeqTransformer", "Seq2SeqTransformerConfig"],
    "gpt": ["GPT", "GPTConfig"],
    "sampling": ["sample_next"],
    "tiled": ["online_softmax", "online_softmax_stats", "tiled_attention"],
    "paths": ["model_path", "save_path"],
    "exercises": ["check"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Import a public name (or a submodule, e.g. ``attnlib.data``) on first use."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # the next lookup does not come here
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise  # the submodule exists but something it imports is missing
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {module.split(".")[0] for module in _EXPORTS})


if TYPE_CHECKING:  # for editors and type checkers: the same names, imported eagerly
    from .attention import causal_mask, masked_softmax, padding_mask, scaled_dot_product_attention, sliding_window_mask
    from .decoder import TransformerDecoderBlock
    from .seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig
    from .gpt import GPT, GPTConfig
    from .layers import FeedForward, RMSNorm, SwiGLU
    from .sampling import sample_next
    from .tiled import online_softmax, online_softmax_stats, tiled_attention
    from .viz.compare import AttentionCompare, compare
    from .data import (Batch, Seq2SeqData, Vocab, batches, make_copy, make_reversal, make_sort_batch, make_sorting,
                       previous_digit_batch, shift_right)
    from .dates import format_date, make_dates
    from .decoding import beam_search, greedy_decode
    from .stats import Spread, above, apart, spread, verdict
    from .exercises import check
    from .minilm import MiniLM, MiniLMOutput, WordPieceTokenizer, load_minilm
    from .gguf_io import GGUFFile, unpermute_rope_rows
    from .gguf_tokenizer import GGUFTokenizer
    from .smollm2 import SmolLM2, SmolLM2Config, load_smollm2
    from .multihead import KVCache, MultiHeadAttention
    from .paths import model_path, save_path
    from .viz.plotting import plot_curves, plot_heads, plot_heatmap, plot_history
    from .positional import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding, sinusoidal_encoding
    from .rnn_attention import AdditiveAttention, LuongAttention
    from .seq2seq import AttentionDecoder, Decoder, DecoderState, Encoder, Seq2Seq, load_seq2seq, save_seq2seq
    from .tagger import TaggerConfig, TransformerTagger
    from .parallel import fork_is_safe, parallel_map
    from .runtime import eval_mode, get_device, progress_bar, seed_everything
    from .training import (History, evaluate, sequence_accuracy, sequence_loss, teacher_forcing_ratio, token_accuracy,
                           train_seq2seq, train_steps)
    from .transformer import TransformerBlock, TransformerEncoder, TransformerSizes
    from .viz.widgets import AttentionExplorer, AttentionHeatmap
