"""Tests of attnlib/decoding.py: greedy decoding and beam search, for both seq2seq families (LSTM and transformer)."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from attnlib import (AdditiveAttention, AttentionDecoder, Decoder, Encoder, LuongAttention, Seq2Seq, beam_search,
                     greedy_decode, make_reversal)
from attnlib.seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig

V = 13


def lstm(kind="additive", bidirectional=False, seed=0):
    torch.manual_seed(seed)
    enc = Encoder(V, 8, 16, bidirectional=bidirectional)
    if kind == "plain":
        return Seq2Seq(enc, Decoder(V, 8, 16))
    att = AdditiveAttention(16, enc.output_dim, 12) if kind == "additive" else LuongAttention(16, enc.output_dim, kind)
    return Seq2Seq(enc, AttentionDecoder(V, 8, 16, enc.output_dim, att))


def transformer(seed=0, max_len=16, dropout=0.0):
    torch.manual_seed(seed)
    return Seq2SeqTransformer(Seq2SeqTransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=16, num_heads=2,
                                                       d_ff=32, max_len=max_len, dropout=dropout))


MODELS = {"plain": lambda s: lstm("plain", True, s), "additive": lambda s: lstm("additive", seed=s),
          "dot": lambda s: lstm("dot", seed=s), "transformer": transformer}


def data():
    d = make_reversal(5, (3, 7), seed=0)
    return d.src, d.src_key_padding_mask


def sequence_logprob(m, src, mask, tokens):
    """Total log p of each decoded sequence (B, T), up to and including its first <eos>, by teacher forcing."""
    with torch.no_grad():
        logits = m.eval()(src, tokens.clamp(min=0), mask)
    lp = torch.log_softmax(logits.double(), -1).gather(-1, tokens.clamp(min=0)[..., None]).squeeze(-1)  # (B, T)
    eos = (tokens == m.eos_id).long()
    before_or_at_eos = torch.cumsum(eos, 1) - eos == 0
    return (lp * before_or_at_eos).sum(1)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_picks_the_argmax_of_a_teacher_forced_pass_over_its_own_output(name):
    m = MODELS[name](3).eval()
    src, mask = data()
    ids = greedy_decode(m, src, mask, max_len=9)
    assert ids.dim() == 2 and ids.shape[0] == 5 and ids.shape[1] <= 9
    with torch.no_grad():
        logits = m(src, ids, mask)
    after_eos = (ids == m.eos_id).cumsum(1) - (ids == m.eos_id).long() > 0  # positions after each sequence's <eos>
    assert torch.equal(logits.argmax(-1)[~after_eos], ids[~after_eos])
    assert (ids[after_eos] == m.pad_id).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_returns_the_attention_of_each_step(name):
    m = MODELS[name](1)
    src, mask = data()
    ids, att = greedy_decode(m, src, mask, max_len=6, return_attention=True)
    assert torch.equal(ids, greedy_decode(m, src, mask, max_len=6))
    T, Ls = ids.shape[1], src.shape[1]
    if name == "plain":
        assert att is None
    elif name == "transformer":  # one (B, h, T, Ls) map per decoder layer, the rows of a teacher-forced pass
        assert [a.shape for a in att] == [(5, 2, T, Ls)] * 2
        with torch.no_grad():
            _, cross = m.eval()(src, ids, mask, return_attention=True)
        for a, c in zip(att, cross):
            torch.testing.assert_close(a, c, atol=1e-6, rtol=0)
            assert (a.masked_select(~mask[:, None, None, :]) == 0).all()
    else:
        assert att.shape == (5, T, Ls)
        torch.testing.assert_close(att.sum(-1), torch.ones(5, T))
        assert (att.masked_select(~mask[:, None, :]) == 0).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_beam_one_equals_greedy(name):
    m = MODELS[name](1)
    src, mask = data()
    g = greedy_decode(m, src, mask, max_len=9)
    b, scores = beam_search(m, src, mask, beam_size=1, max_len=9)
    assert torch.equal(b[:, : g.shape[1]], g) and (b[:, g.shape[1]:] == m.pad_id).all()
    assert scores.shape == (5,)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_beam_score_is_the_log_probability_of_the_returned_sequence(name):
    m = MODELS[name](2).eval()
    src, mask = data()
    b, scores = beam_search(m, src, mask, beam_size=4, max_len=8, length_penalty=0.0)
    torch.testing.assert_close(scores, sequence_logprob(m, src, mask, b), atol=1e-5, rtol=0)
    one, s = beam_search(m, src[0, : int(mask[0].sum())], beam_size=4, max_len=8, length_penalty=0.0)
    assert one.dim() == 1 and s.dim() == 0
    assert torch.equal(one, b[0, : one.shape[0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("family", ["lstm", "transformer"])
def test_a_beam_that_prunes_nothing_finds_the_most_likely_sequence(seed, family):
    """Exhaustive search is the one case where beam >= greedy is a theorem.

    With 5 tokens and 3 steps there are at most 5**3 = 125 partial outputs at any step, so a beam of
    125 never drops one: its best must equal the best of all sequences scored one by one, and
    greedy's sequence is one of them. (A narrow beam can end below greedy: greedy's prefix may fall
    out of the beam. So that is not asserted for beam_size=4 above.)
    """
    d = make_reversal(4, (1, 3), vocab_size=2, seed=seed)
    n, T = len(d.src_vocab), 3
    assert n == 5
    torch.manual_seed(seed)
    if family == "lstm":
        m = Seq2Seq(Encoder(n, 8, 16), AttentionDecoder(n, 8, 16, 16, AdditiveAttention(16, 16, 12))).eval()
    else:
        m = Seq2SeqTransformer(Seq2SeqTransformerConfig(n, n, d_model=16, num_heads=2, d_ff=32, max_len=8)).eval()
    beam, beam_score = beam_search(m, d.src, d.src_key_padding_mask, beam_size=n**T, max_len=T, length_penalty=0.0)
    candidates = []
    for seq in itertools.product(range(n), repeat=T):  # every output; after <eos> only padding counts
        eos = seq.index(m.eos_id) if m.eos_id in seq else T
        if all(t == m.pad_id for t in seq[eos + 1:]):
            candidates.append(seq)
    cand = torch.tensor(candidates)  # (N, T)
    best = torch.stack([sequence_logprob(m, d.src[i:i + 1].expand(len(cand), -1),
                                         d.src_key_padding_mask[i:i + 1].expand(len(cand), -1), cand).max()
                        for i in range(len(d))])
    torch.testing.assert_close(beam_score, best, atol=1e-5, rtol=0)
    greedy = greedy_decode(m, d.src, d.src_key_padding_mask, max_len=T)
    greedy_lp = sequence_logprob(m, d.src, d.src_key_padding_mask, F.pad(greedy, (0, T - greedy.shape[1])))
    assert (greedy_lp <= beam_score + 1e-6).all()


@pytest.mark.parametrize("name", ["additive", "transformer"])
def test_decoding_restores_training_mode(name):
    m = MODELS[name](0).train()
    src, mask = data()
    greedy_decode(m, src, mask, max_len=3)
    beam_search(m, src, mask, beam_size=2, max_len=3)
    assert m.training
    m.eval()
    greedy_decode(m, src, mask, max_len=3)
    assert not m.training


def test_bad_arguments_are_refused():
    m = lstm()
    src, mask = data()
    with pytest.raises(ValueError, match="beam_size must be a positive int, got 0"):
        beam_search(m, src, beam_size=0)
    with pytest.raises(ValueError, match="max_len must be a positive int, got 0"):
        greedy_decode(m, src, max_len=0)
    with pytest.raises(ValueError, match="max_len must be a positive int, got 2.0"):
        beam_search(m, src, max_len=2.0)
    short = transformer(max_len=4)
    with torch.no_grad():
        short.head.bias[short.eos_id] = -1e4  # it never ends, so it runs out of positions
    with pytest.raises(ValueError, match=r"this model decodes at most max_len=4 tokens \(its positions\); pass max_len <= 4"):
        greedy_decode(short, torch.tensor([[4, 5, 2]]), max_len=5)
    assert greedy_decode(short, torch.tensor([[4, 5, 2]]), max_len=4).shape == (1, 4)
