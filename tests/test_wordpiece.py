"""attnlib.wordpiece against the reference BERT tokenizers of transformers, on the model's own vocab.txt."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # the references load from the package's local files, never a hub

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib.minilm import model_dir
from attnlib.wordpiece import WordPieceTokenizer

TRICKY = [
    "The animal didn't cross the street because it was too tired.",
    "Héllo, Wörld! naïve café résumé Ångström",
    "didn't can't won't y'all rock'n'roll",
    "don’t use curly ‘quotes’ — or “these” … «those»",
    "I paid $1,234.56 for 3.5kg (approx.) on 2024-01-31 at 10:30pm; 50% off!",
    "3.14159 1e-10 0xFF #hashtag @user http://example.com/a?b=c&d=e",
    "CamelCase MIXED case iPhone McDonald's",
    "😀🎉 emoji 🤖! ❤️ 👍🏽",
    "straße Ærøskøbing œuvre İstanbul Σίσυφος ǅ",
    "ﬁne ligature ½ ² ℃ ™",
    "北京欢迎你 and 東京, 한국어 テスト",
    "Привет мир, مرحبا, हिन्दी",
    "tab\there\nnew line\r\nend\u00a0nbsp zero\u200bwidth",
    "control\x00\x07chars\ufffd gone",
    "e\u0301 combining accent",
    "supercalifragilisticexpialidocious antidisestablishmentarianism tokenizer",
    "x" * 101,
    "a" * 100,
    "[CLS] inside [SEP] text [MASK] a[SEP]b [cls] lower",
    "",
    "   ",
]


@pytest.fixture(scope="module")
def ours():
    return WordPieceTokenizer.from_vocab_file(model_dir() / "vocab.txt")


@pytest.fixture(scope="module")
def fast():
    """transformers' BertTokenizer (Rust backend): the tokenizer sentence-transformers uses for this model."""
    from transformers import BertTokenizer
    return BertTokenizer.from_pretrained(str(model_dir()))


@pytest.fixture(scope="module")
def slow():
    """transformers' pure-Python BERT tokenizer."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy
    return BertTokenizerLegacy.from_pretrained(str(model_dir()))


@pytest.mark.parametrize("text", TRICKY)
def test_ids_equal_both_references(ours, fast, slow, text):
    mine = ours.encode(text)
    assert mine == fast.encode(text), (ours.convert_ids_to_tokens(mine), fast.tokenize(text))
    assert mine == slow.encode(text), (ours.convert_ids_to_tokens(mine), slow.tokenize(text))


def test_specific_splits(ours):
    assert ours.tokenize("didn't") == ["didn", "'", "t"]
    assert ours.tokenize("Héllo, WÖRLD!") == ["hello", ",", "world", "!"]
    assert ours.tokenize("tokenizer") == ["token", "##izer"]
    assert ours.tokenize("$1,234.56") == ["$", "1", ",", "234", ".", "56"]
    assert ours.tokenize("北京") == ["北", "京"]
    assert ours.tokenize("😀") == ["[UNK]"]
    assert ours.tokenize("x" * 101) == ["[UNK]"]
    assert ours.tokenize("a\x00b\tc") == ["ab", "c"]
    assert ours.tokenize("[SEP]") == ["[SEP]"]


def test_basic_tokenize_and_wordpiece_are_the_two_stages(ours):
    words = ours.basic_tokenize("Naïve tokenizers, eh?")
    assert words == ["naive", "tokenizers", ",", "eh", "?"]
    assert [p for w in words for p in ours.wordpiece(w)] == ours.tokenize("Naïve tokenizers, eh?")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_random_text_equals_python_reference(ours, slow, text):
    # The Rust reference disagrees with both Python implementations only on code points that are
    # unassigned or newer than its Unicode tables; the pure-Python reference matches ours everywhere.
    assert ours.encode(text) == slow.encode(text)


def test_batch_is_padded_with_mask_and_tokens(ours, fast):
    texts = ["A short one.", "A somewhat longer sentence, with a comma.", ""]
    batch = ours(texts)
    ref = fast(texts, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], ref["input_ids"])
    assert torch.equal(batch["attention_mask"], ref["attention_mask"])
    assert batch.input_ids.dtype == torch.long and batch.attention_mask.dtype == torch.long
    assert [len(t) for t in batch["tokens"]] == batch["attention_mask"].sum(1).tolist()
    assert batch["tokens"][2] == ["[CLS]", "[SEP]"]
    assert ours.convert_ids_to_tokens(batch["input_ids"][0, :3]) == ["[CLS]", "a", "short"]


def test_single_string_and_truncation(ours, fast):
    assert ours("hello world")["input_ids"].shape == (1, 4)
    text = "one two three four five six seven"
    cut = ours(text, max_length=5)
    assert cut["tokens"][0] == ["[CLS]", "one", "two", "three", "[SEP]"]
    assert cut["input_ids"][0].tolist() == fast.encode(text, truncation=True, max_length=5)


@pytest.mark.parametrize("bad", [[], [1, 2], None, ["ok", 3]])
def test_bad_batches_raise(ours, bad):
    with pytest.raises(ValueError, match="texts must be"):
        ours(bad)


def test_bad_max_length_and_vocab(ours):
    with pytest.raises(ValueError, match="max_length must be at least 2"):
        ours("hi", max_length=1)
    with pytest.raises(ValueError, match=r"missing \['\[UNK\]'"):
        WordPieceTokenizer({"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3})


def test_vocab_file_roundtrip(ours, fast):
    assert len(ours) == 30522 == fast.vocab_size
    assert ours.pad_token_id == 0 and ours.cls_token_id == 101 and ours.sep_token_id == 102
    assert ours.convert_tokens_to_ids(["hello", "never-a-token"]) == [7592, ours.unk_token_id]
