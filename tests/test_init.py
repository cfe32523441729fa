"""The package namespace: every public name importable from attnlib, nothing heavy imported until used."""
import subprocess
import sys

import pytest

import attnlib

NAMES = [  # everything the notebooks and the other helpers import from attnlib
    "AdditiveAttention", "AttentionDecoder", "AttentionExplorer", "AttentionHeatmap", "Batch", "Decoder",
    "DecoderState", "Encoder", "FeedForward", "History", "LearnedPositionalEmbedding", "LearnedPositionalEncoding",
    "LuongAttention", "MiniLM", "MiniLMOutput", "MultiHeadAttention", "Seq2Seq", "Seq2SeqData",
    "SinusoidalPositionalEncoding", "TaggerConfig", "TransformerBlock", "TransformerEncoder", "TransformerTagger",
    "Vocab", "WordPieceTokenizer", "batches", "beam_search", "causal_mask", "check",
    "format_date", "get_device", "greedy_decode", "load_minilm", "load_seq2seq", "make_copy", "make_dates",
    "make_reversal", "make_sorting", "masked_softmax", "model_path", "padding_mask", "plot_curves", "plot_heads",
    "plot_heatmap", "progress_bar", "save_path", "save_seq2seq", "scaled_dot_product_attention", "seed_everything",
    "sequence_accuracy", "sinusoidal_encoding", "teacher_forcing_ratio", "token_accuracy", "train_seq2seq",
    "evaluate", "make_sort_batch", "previous_digit_batch", "shift_right", "sequence_loss", "train_steps", "Spread",
    "above", "apart", "spread", "verdict",
]


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("name", NAMES)
def test_every_public_name_is_importable(name):
    assert name in attnlib.__all__
    namespace = {}
    exec(f"from attnlib import {name}", namespace)
    assert namespace[name] is getattr(attnlib, name)


def test_submodules_are_reachable_as_attributes():
    assert attnlib.data.pad_sequences([[1, 2], [3]]).tolist() == [[1, 2], [3, 0]]  # as notebook 02 uses it
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        attnlib.nonexistent


def test_import_attnlib_loads_neither_pyplot_nor_anywidget():
    """`import attnlib` used to import matplotlib.pyplot and anywidget eagerly."""
    heavy = "[m for m in ('matplotlib.pyplot', 'anywidget') if m in sys.modules]"
    assert run(f"import sys, attnlib; attnlib.MultiHeadAttention; attnlib.seed_everything(0); print({heavy})") == "[]"
    assert run(f"import sys, attnlib; attnlib.plot_heatmap; print({heavy})") == "['matplotlib.pyplot']"
    assert "anywidget" in run(f"import sys, attnlib; attnlib.AttentionExplorer; print({heavy})")


def test_no_leftover_merge_comment():
    assert "helpers add their" not in open(attnlib.__file__, encoding="utf-8").read()
