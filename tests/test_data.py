"""Tests of attnlib/data.py and attnlib/dates.py: vocabulary, deterministic toy tasks, date spans, batches, the
decoder input, and the per-position batch makers against the notebooks' own."""
import datetime as dt

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from attnlib import (Seq2SeqData, Vocab, batches, format_date, make_copy, make_dates, make_reversal, make_sort_batch,
                     make_sorting, padding_mask, previous_digit_batch, shift_right)


def test_vocab_round_trip_and_specials():
    v = Vocab(range(5))
    assert (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert v.itos[:3] == ["<pad>", "<bos>", "<eos>"] and len(v) == 8
    ids = v.encode([3, 0, 4], add_bos=True)
    assert ids == [1, v.stoi["3"], v.stoi["0"], v.stoi["4"], 2]
    assert v.decode(ids) == ["3", "0", "4"]
    assert v.decode(torch.tensor(ids + [0, 0])) == ["3", "0", "4"]
    assert v.decode(ids + [5], strip=False)[-2:] == ["<eos>", "2"]
    assert v.decode([5, 2, 6]) == ["2"]  # stops at eos
    chars = Vocab("abca")
    assert chars.itos[3:] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        chars.encode("az")


def test_special_ids_follow_the_order_of_specials():
    """They used to be 0/1/2 whatever the order, so <eos> could decode as <unk> and padding as <bos>."""
    v = Vocab("ab", specials=("<unk>", "<eos>", "<pad>", "<bos>"))
    assert v.itos[:4] == ["<unk>", "<eos>", "<pad>", "<bos>"]
    assert (v.pad_id, v.bos_id, v.eos_id) == (2, 3, 1)
    ids = v.encode("ab", add_bos=True)
    assert ids == [3, 4, 5, 1]
    assert v.decode(ids + [2, 2]) == ["a", "b"]
    assert v.decode([4, 0, 5]) == ["a", "<unk>", "b"]  # id 0 is <unk> here, not padding to drop


def test_specials_it_cannot_honour_are_refused():
    with pytest.raises(ValueError, match=r"specials must include \('<pad>', '<bos>', '<eos>'\).*missing \['<bos>'\]"):
        Vocab("ab", specials=("<pad>", "<s>", "<eos>"))
    with pytest.raises(ValueError, match="must not repeat"):
        Vocab("ab", specials=("<pad>", "<bos>", "<eos>", "<pad>"))
    with pytest.raises(ValueError, match=r"the tokens \['<eos>'\] are spelled like specials"):
        Vocab(["a", "<eos>"])


@pytest.mark.parametrize("maker", [make_reversal, make_copy, make_sorting])
def test_toy_tasks_deterministic_and_correct(maker):
    a, b, c = maker(50, 6, seed=3), maker(50, 6, seed=3), maker(50, 6, seed=4)
    assert torch.equal(a.src, b.src) and torch.equal(a.tgt, b.tgt)
    assert not torch.equal(a.src, c.src)
    assert a.src.shape == (50, 7) and a.tgt.shape == (50, 7)  # 6 tokens + eos
    expected = {make_reversal: lambda s: s[::-1], make_copy: list, make_sorting: sorted}[maker]
    for s, t, src_ids, tgt_ids in zip(a.src_raw, a.tgt_raw, a.src, a.tgt):
        assert t == expected(s)
        assert a.src_vocab.decode(src_ids) == [str(x) for x in s]
        assert a.tgt_vocab.decode(tgt_ids) == [str(x) for x in t]


def test_sorting_range_and_global_rng_untouched():
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    d = make_sorting(200, 8, low=2, high=19, seed=0)
    assert torch.equal(torch.rand(1), before)
    values = {x for s in d.src_raw for x in s}
    assert min(values) >= 2 and max(values) <= 19 and len(values) > 10


def test_variable_lengths_are_padded():
    d = make_reversal(100, (3, 9), seed=0)
    lengths = d.src_key_padding_mask.sum(1)
    assert lengths.min() >= 4 and lengths.max() <= 10 and lengths.min() < lengths.max()
    for i in range(100):
        n = len(d.src_raw[i])
        assert d.src[i, n] == d.src_vocab.eos_id and (d.src[i, n + 1 :] == 0).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        make_reversal(0, 5)
    with pytest.raises(ValueError, match="n must be a positive int, got 2.0"):
        make_dates(2.0)
    with pytest.raises(ValueError, match="min <= max"):
        make_copy(5, (6, 3))
    with pytest.raises(ValueError, match="low must be <= high"):
        make_sorting(5, 3, low=9, high=2)


def test_dates_parse_back_and_spans_point_at_fields():
    d = make_dates(500, seed=0)
    assert d.src_raw == make_dates(500, seed=0).src_raw and d.src_raw != make_dates(500, seed=1).src_raw
    months = ["january", "february", "march", "april", "may", "june", "july",
              "august", "september", "october", "november", "december"]
    for text, iso, spans, ids in zip(d.src_raw, d.tgt_raw, d.spans, d.src):
        date = dt.date.fromisoformat(iso)
        assert date.isoformat() == iso
        assert "".join(d.src_vocab.decode(ids)) == text  # position i of src is character i
        year, month, day = (text[slice(*spans[k])] for k in ("year", "month", "day"))
        assert int(year) == date.year if len(year) == 4 else int(year) == date.year % 100
        assert month.isdigit() and int(month) == date.month or months[date.month - 1].startswith(month.lower())
        assert int(day.rstrip("stndrh")) == date.day
        assert "".join(d.tgt_vocab.decode(d.tgt_vocab.encode(iso))) == iso
    texts = [format_date(dt.date(2024, 3, 5), f)[0] for f in range(10)]
    for example in ["tuesday, march 5 2024", "05.03.24", "Mar 5, 2024", "5 march 2024", "2024/03/05",
                    "03/05/2024", "5th of March, 2024", "MARCH 05 2024"]:
        assert example in texts
    text, spans = format_date(dt.date(2024, 3, 5), 6)
    assert spans == {"day": (0, 3), "month": (7, 12), "year": (14, 18)}, text


def test_batches_cover_everything_once_and_trim_padding():
    d = make_reversal(70, (2, 8), seed=0)
    seen = []
    for b in batches(d, 16, shuffle=True, seed=1):
        assert b.src.shape[0] == b.tgt.shape[0] == b.src_key_padding_mask.shape[0] <= 16
        assert b.src_key_padding_mask.sum(1).max() == b.src.shape[1]  # no all-pad column
        assert torch.equal(b.src_key_padding_mask, b.src != 0)
        assert torch.equal(b.src, d.src[b.index, : b.src.shape[1]])
        seen += b.index.tolist()
    assert sorted(seen) == list(range(70))
    order = lambda s: torch.cat([b.index for b in batches(d, 16, seed=s)]).tolist()  # noqa: E731
    assert order(1) == order(1) != order(2)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        next(batches(d, 0))


def test_split_and_subset():
    d = make_dates(30, seed=0)
    a, b = d.split(20)
    assert len(a) == 20 and len(b) == 10 and b.src_raw == d.src_raw[20:] and b.spans == d.spans[20:]
    assert torch.equal(a.tgt, d.tgt[:20, : a.tgt.shape[1]])


def test_vocab_as_plain_lists_and_back():
    v = Vocab("ab", specials=("<unk>", "<eos>", "<pad>", "<bos>"))
    d = v.to_dict()
    assert d == {"itos": ["<unk>", "<eos>", "<pad>", "<bos>", "a", "b"], "specials": ["<unk>", "<eos>", "<pad>", "<bos>"]}
    back = Vocab.from_dict(d)
    assert back.itos == v.itos and (back.pad_id, back.bos_id, back.eos_id) == (2, 3, 1)


def test_from_raw_encodes_and_pads():
    v = Vocab("abc")
    d = Seq2SeqData.from_raw(["ab", "c"], ["b", "abc"], v, v)
    assert d.src.tolist() == [[3, 4, 2], [5, 2, 0]] and d.tgt.tolist() == [[4, 2, 0, 0], [3, 4, 5, 2]]
    assert d.src_key_padding_mask.tolist() == [[True, True, True], [True, True, False]]


def test_shift_right_puts_bos_first_and_drops_the_last_token():
    tgt = torch.tensor([[5, 6, 2], [7, 2, 0]])
    assert shift_right(tgt, 1).tolist() == [[1, 5, 6], [1, 7, 2]]
    with pytest.raises(ValueError, match="tgt must hold integer token ids, got dtype torch.float32"):
        shift_right(tgt.float(), 1)


def notebook_07_sort_batch(n, generator, min_len=1, max_len=12):
    """Notebook 07's make_sort_batch, copied as it stands (PAD 10, IGNORE -100)."""
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    palette_size = torch.randint(1, 11, (n,), generator=generator)
    palettes = torch.rand(n, 10, generator=generator).argsort(dim=1)
    picks = (torch.rand(n, max_len, generator=generator) * palette_size[:, None]).long()
    digits = palettes.gather(1, picks)
    real = padding_mask(lengths, max_len)
    tokens = digits.masked_fill(~real, 10)
    targets = tokens.sort(dim=1).values.masked_fill(~real, -100)
    return tokens, targets, real


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31), lengths=st.tuples(st.integers(1, 12), st.integers(0, 8)))
def test_hypothesis_make_sort_batch_equals_notebook_07s_and_sorts(n, seed, lengths):
    min_len, max_len = lengths[0], lengths[0] + lengths[1]
    want = notebook_07_sort_batch(n, torch.Generator().manual_seed(seed), min_len, max_len)
    got = make_sort_batch(n, torch.Generator().manual_seed(seed), min_len, max_len)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert all(torch.equal(a, b) for a, b in zip(make_sort_batch(n, seed, min_len, max_len), want))  # an int seed
    tokens, targets, real = got
    lens = real.sum(1)
    assert ((lens >= min_len) & (lens <= max_len)).all() and (tokens[~real] == 10).all() and (targets[~real] == -100).all()
    for row, target, keep in zip(tokens, targets, real):
        assert target[keep].tolist() == sorted(row[keep].tolist())


def test_make_sort_batch_draws_from_the_generator_and_palettes_repeat_digits():
    g = torch.Generator().manual_seed(0)
    first, second = make_sort_batch(500, g, min_len=12), make_sort_batch(500, g, min_len=12)
    assert not torch.equal(first[0], second[0])  # the generator advanced
    runs = torch.nn.functional.one_hot(first[0], 11).sum(1).max(1).values  # (500,) the most repeated digit's count
    assert (runs >= 6).float().mean() > 0.1  # uniform digits would give 6 of one digit in 12 about 0.4% of the time
    with pytest.raises(ValueError, match="max_len must be at least min_len, got min_len=5 and max_len=3"):
        make_sort_batch(2, 0, min_len=5, max_len=3)
    with pytest.raises(ValueError, match="pad_id must be 10 or more"):
        make_sort_batch(2, 0, pad_id=3)
    with pytest.raises(ValueError, match="generator must be a torch.Generator or an int seed, got float"):
        make_sort_batch(2, 0.5)


def test_previous_digit_batch_targets_the_digit_before():
    g = torch.Generator().manual_seed(4321)
    tokens, targets = previous_digit_batch(50, g, length=24)
    reference = torch.randint(0, 10, (50, 24), generator=torch.Generator().manual_seed(4321))  # notebooks 06 and 12
    assert torch.equal(tokens, reference)
    assert (targets[:, 0] == -100).all() and torch.equal(targets[:, 1:], tokens[:, :-1])
    with pytest.raises(ValueError, match="length must be a positive int, got 0"):
        previous_digit_batch(2, g, length=0)
