"""The package namespace: every public name importable from attnlib, nothing heavy imported until used."""
import subprocess
import sys

import pytest

import attnlib

CORE = [  # the attention names every part of the series teaches; each must stay exported
    "KVCache", "MultiHeadAttention", "RotaryEmbedding", "RMSNorm", "SwiGLU", "FeedForward", "TransformerBlock",
    "TransformerEncoder", "TransformerDecoderBlock", "GPT", "GPTConfig", "causal_mask", "padding_mask",
    "sliding_window_mask", "scaled_dot_product_attention", "masked_softmax", "sinusoidal_encoding",
    "SinusoidalPositionalEncoding", "LearnedPositionalEncoding", "seed_everything", "get_device", "progress_bar",
    "eval_mode", "check", "evaluate", "greedy_decode", "beam_search", "train_seq2seq", "train_steps",
    "spread", "verdict", "make_sort_batch", "previous_digit_batch",
]
NAMES = sorted(attnlib.__all__)


def test_the_core_names_are_exported():
    assert set(CORE) <= set(attnlib.__all__)


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
