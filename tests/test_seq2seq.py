"""Tests of attnlib/seq2seq.py: shapes, masks, teacher forcing, greedy == beam(1), beam search, save/load."""
import itertools
import re

import pytest
import torch

from attnlib import (AdditiveAttention, AttentionDecoder, Decoder, Encoder, LuongAttention, Seq2Seq,
                     beam_search, greedy_decode, load_seq2seq, make_reversal, save_seq2seq)

V = 13


def model(kind="additive", bidirectional=False, layers=1, seed=0):
    torch.manual_seed(seed)
    enc = Encoder(V, 8, 16, bidirectional=bidirectional, num_layers=layers)
    if kind == "plain":
        return Seq2Seq(enc, Decoder(V, 8, 16, num_layers=layers))
    att = AdditiveAttention(16, enc.output_dim, 12) if kind == "additive" else LuongAttention(16, enc.output_dim, kind)
    return Seq2Seq(enc, AttentionDecoder(V, 8, 16, enc.output_dim, att, num_layers=layers))


def data():
    d = make_reversal(5, (3, 7), seed=0)
    return d.src, d.src_mask, d.tgt


@pytest.mark.parametrize("kind,bidi,layers", [("plain", False, 1), ("plain", True, 2), ("additive", False, 1),
                                              ("additive", True, 2), ("general", True, 1), ("concat", False, 1)])
def test_forward_shapes(kind, bidi, layers):
    m = model(kind, bidi, layers)
    src, mask, tgt = data()
    logits, w = m(src, mask, tgt)
    assert logits.shape == (5, tgt.shape[1], V)
    if kind == "plain":
        assert w is None
    else:
        assert w.shape == (5, tgt.shape[1], src.shape[1])
        assert (w[~mask[:, None, :].expand_as(w)] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(5, tgt.shape[1]))
    logits.sum().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


def test_mask_lengths_and_default_agree_and_padding_is_ignored():
    m = model("additive", bidirectional=True)
    src, mask, tgt = data()
    a, _ = m(src, mask, tgt)
    b, _ = m(src, mask.sum(1), tgt)
    c, _ = m(src, None, tgt)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    # extra padding columns change nothing
    d, _ = m(torch.cat([src, torch.zeros(5, 3, dtype=torch.long)], 1), None, tgt)
    torch.testing.assert_close(a, d)
    # one sequence alone gives the same result as inside the batch
    n = int(mask[1].sum())
    e, _ = m(src[1:2, :n], None, tgt[1:2])
    torch.testing.assert_close(e[0], a[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("row", [[0, 1, 1, 1], [1, 0, 1, 0]], ids=["left padding", "a gap"])
def test_masks_the_encoder_cannot_read_are_refused(row):
    """The encoder reads the first mask.sum() tokens of each row; with left padding or gaps those are the
    wrong tokens, and this used to pass silently."""
    m = model("additive")
    src = torch.tensor([[4, 5, 6, 2], [4, 5, 6, 2]])
    mask = torch.tensor([[1, 1, 1, 1], row], dtype=torch.bool)
    with pytest.raises(ValueError, match=rf"row 1 of src_mask is {re.escape(str(row))}: the real tokens must come first"):
        m(src, mask, src)
    with pytest.raises(ValueError, match=r"row 1 of src_mask"):
        greedy_decode(m, src, mask)
    padded = src.masked_fill(~mask, m.pad_id)  # the same layout written with pad tokens, and no mask
    with pytest.raises(ValueError, match=r"row 1 of src != pad_id \(0\) is"):
        m.encode(padded)


def test_lengths_out_of_range_are_refused():
    m = model("additive")
    src, _, tgt = data()
    with pytest.raises(ValueError, match=rf"every length must be between 0 and L={src.shape[1]}"):
        m(src, torch.full((5,), src.shape[1] + 1), tgt)


def test_teacher_forcing_zero_feeds_predictions():
    m = model("additive")
    src, mask, tgt = data()
    free, w_free = m(src, mask, tgt, teacher_forcing=0.0)
    greedy, w_greedy = greedy_decode(m, src, mask, max_len=tgt.shape[1])
    T = greedy.shape[1]
    first_eos = (greedy == m.eos_id).float().argmax(1)
    for i in range(5):  # identical until each sequence's eos (after it greedy pads)
        n = int(first_eos[i]) + 1 if (greedy[i] == m.eos_id).any() else T
        assert torch.equal(free[i, :n].argmax(-1), greedy[i, :n])
        torch.testing.assert_close(w_free[i, :n], w_greedy[i, :n])
    with pytest.raises(ValueError, match="teacher_forcing"):
        m(src, mask, tgt, teacher_forcing=1.5)


def test_mismatched_parts_raise():
    with pytest.raises(ValueError, match="must match"):
        Seq2Seq(Encoder(V, 8, 16), Decoder(V, 8, 32))
    with pytest.raises(ValueError, match="key_dim=16 but the decoder needs key_dim=32"):
        AttentionDecoder(V, 8, 16, 32, AdditiveAttention(16, 16, 8))
    with pytest.raises(ValueError, match="enc_dim=16 but the encoder outputs 32"):
        Seq2Seq(Encoder(V, 8, 16, bidirectional=True), AttentionDecoder(V, 8, 16, 16, AdditiveAttention(16, 16, 8)))
    m = model()
    src, mask, tgt = data()
    with pytest.raises(ValueError, match="batch sizes must match"):
        m(src, mask, tgt[:2])
    with pytest.raises(ValueError, match="at least one real token"):
        m(src, torch.zeros_like(mask), tgt)


@pytest.mark.parametrize("kind", ["plain", "additive", "dot"])
def test_beam_one_equals_greedy(kind):
    m = model(kind, bidirectional=kind == "plain", seed=1)
    src, mask, _ = data()
    g, _ = greedy_decode(m, src, mask, max_len=9)
    b, scores = beam_search(m, src, mask, beam_size=1, max_len=9)
    assert torch.equal(b[:, : g.shape[1]], g) and (b[:, g.shape[1]:] == m.pad_id).all()
    assert scores.shape == (5,)


def sequence_logprob(m, src, mask, tokens):
    """Total log p of each decoded sequence (B, T), up to and including its first <eos>, by teacher forcing."""
    with torch.no_grad():
        logits, _ = m(src, mask, tokens)
    lp = torch.log_softmax(logits.double(), -1).gather(-1, tokens[..., None]).squeeze(-1)  # (B, T)
    eos = (tokens == m.eos_id).long()
    before_or_at_eos = torch.cumsum(eos, 1) - eos == 0
    return (lp * before_or_at_eos).sum(1)


def test_beam_score_is_the_log_probability_of_the_returned_sequence_and_single_sequence():
    m = model("additive", seed=2).eval()
    src, mask, _ = data()
    b, scores = beam_search(m, src, mask, beam_size=4, max_len=8, length_penalty=0.0)
    torch.testing.assert_close(scores, sequence_logprob(m, src, mask, b), atol=1e-5, rtol=0)
    one, s = beam_search(m, src[0, : int(mask[0].sum())], beam_size=4, max_len=8, length_penalty=0.0)
    assert one.dim() == 1 and s.dim() == 0
    assert torch.equal(one, b[0, : one.shape[0]])
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(m, src, beam_size=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_beam_that_prunes_nothing_finds_the_most_likely_sequence(seed):
    """Exhaustive search is the one case where beam >= greedy is a theorem.

    With V = 5 tokens and 3 steps there are at most 5**3 = 125 partial outputs at any step, so a
    beam of 125 never drops one: its best must equal the best of all sequences scored one by one,
    and greedy's sequence is one of them. (A narrow beam can end below greedy: greedy's prefix
    may fall out of the beam. So that is not asserted for beam_size=4 above.)
    """
    d = make_reversal(4, (1, 3), vocab_size=2, seed=seed)
    V, T = len(d.src_vocab), 3
    assert V == 5
    torch.manual_seed(seed)
    enc = Encoder(V, 8, 16)
    m = Seq2Seq(enc, AttentionDecoder(V, 8, 16, 16, AdditiveAttention(16, 16, 12))).eval()
    beam, beam_score = beam_search(m, d.src, d.src_mask, beam_size=V**T, max_len=T, length_penalty=0.0)

    candidates = []
    for seq in itertools.product(range(V), repeat=T):  # every output; after <eos> only padding counts
        eos = seq.index(m.eos_id) if m.eos_id in seq else T
        if all(t == m.pad_id for t in seq[eos + 1:]):
            candidates.append(seq)
    cand = torch.tensor(candidates)  # (N, T)
    best = torch.stack([
        sequence_logprob(m, d.src[i:i + 1].expand(len(cand), -1), d.src_mask[i:i + 1].expand(len(cand), -1), cand).max()
        for i in range(len(d))
    ])
    torch.testing.assert_close(beam_score, best, atol=1e-5, rtol=0)
    greedy, _ = greedy_decode(m, d.src, d.src_mask, max_len=T)
    greedy_lp = sequence_logprob(m, d.src, d.src_mask, torch.nn.functional.pad(greedy, (0, T - greedy.shape[1])))
    assert (greedy_lp <= beam_score + 1e-6).all()


def test_decoding_restores_training_mode():
    m = model()
    m.train()
    src, mask, _ = data()
    greedy_decode(m, src, mask, max_len=3)
    beam_search(m, src, mask, beam_size=2, max_len=3)
    assert m.training


@pytest.mark.parametrize("kind,bidi,layers", [("plain", False, 1), ("plain", True, 2), ("additive", True, 2),
                                              ("general", False, 1), ("concat", True, 1), ("dot", False, 1)])
def test_save_load_round_trip_gives_identical_outputs(tmp_path, kind, bidi, layers):
    m = model(kind, bidi, layers, seed=3)
    m.decoder.dropout = 0.25  # a non-default setting must survive the trip
    d = make_reversal(5, (3, 7), seed=0)
    path = tmp_path / "m.pt"
    save_seq2seq(m, path, src_vocab=d.src_vocab, tgt_vocab=d.tgt_vocab, test_acc=0.5, task={"name": "reversal"})
    blob = torch.load(path, weights_only=True)  # plain types only
    assert set(blob) == {"config", "state_dict", "vocabs", "extra"}
    loaded, extra = load_seq2seq(path)
    assert not loaded.training and loaded.decoder.dropout == 0.25
    assert type(loaded.decoder) is type(m.decoder)
    assert extra["test_acc"] == 0.5 and extra["task"] == {"name": "reversal"}
    assert extra["src_vocab"].itos == d.src_vocab.itos and extra["tgt_vocab"].stoi == d.tgt_vocab.stoi
    m.eval()
    with torch.no_grad():
        want_logits, want_w = m(d.src, d.src_mask, d.tgt)
        got_logits, got_w = loaded(d.src, d.src_mask, d.tgt)
    assert torch.equal(want_logits, got_logits)
    assert (want_w is None and got_w is None) or torch.equal(want_w, got_w)
    assert torch.equal(greedy_decode(m, d.src, d.src_mask)[0], greedy_decode(loaded, d.src, d.src_mask)[0])
    other = model(kind, bidi, layers, seed=4).eval()  # a different model really differs: the weights were loaded
    with torch.no_grad():
        assert not torch.allclose(other(d.src, d.src_mask, d.tgt)[0], got_logits)


def test_save_without_vocabs_and_unknown_attention(tmp_path):
    m = model("additive")
    save_seq2seq(m, tmp_path / "m.pt")
    _, extra = load_seq2seq(tmp_path / "m.pt")
    assert extra == {"src_vocab": None, "tgt_vocab": None}

    class Custom(torch.nn.Module):
        query_dim, key_dim = 16, 16

        def forward(self, query, keys, mask=None):
            return keys.mean(1), torch.full(keys.shape[:2], 1.0 / keys.shape[1])

    odd = Seq2Seq(Encoder(V, 8, 16), AttentionDecoder(V, 8, 16, 16, Custom()))
    with pytest.raises(ValueError, match="Custom"):
        save_seq2seq(odd, tmp_path / "odd.pt")
