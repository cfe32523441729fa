"""Tests of attnlib/seq2seq.py: shapes, padding, the fast teacher-forced paths against step-by-step decoding and
against PyTorch's LSTM, scheduled sampling, errors, save/load."""
import re

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from torch import nn

from attnlib import (AdditiveAttention, AttentionDecoder, Decoder, Encoder, LuongAttention, Seq2Seq, greedy_decode,
                     load_seq2seq, make_reversal, save_seq2seq, shift_right)

V = 13


def model(kind="additive", bidirectional=False, layers=1, seed=0, dropout=0.0):
    torch.manual_seed(seed)
    enc = Encoder(V, 8, 16, bidirectional=bidirectional, num_layers=layers)
    if kind == "plain":
        return Seq2Seq(enc, Decoder(V, 8, 16, num_layers=layers, dropout=dropout))
    att = AdditiveAttention(16, enc.output_dim, 12) if kind == "additive" else LuongAttention(16, enc.output_dim, kind)
    return Seq2Seq(enc, AttentionDecoder(V, 8, 16, enc.output_dim, att, num_layers=layers, dropout=dropout))


def data():
    d = make_reversal(5, (3, 7), seed=0)
    return d.src, d.src_key_padding_mask, d.tgt


def step_by_step(m, src, mask, tgt):
    """Teacher forcing written as a loop of decode_step: logits (B, T, V) and weights (B, T, Ls) or None."""
    state = m.encode(src, mask)
    logits, weights = [], []
    for token in shift_right(tgt, m.bos_id).unbind(1):
        step_logits, state, w = m.decode_step(token, state)
        logits.append(step_logits)
        weights.append(w)
    return torch.stack(logits, 1), None if weights[0] is None else torch.stack(weights, 1)


KINDS = [("plain", False, 1), ("plain", True, 2), ("additive", False, 1), ("additive", True, 2), ("general", True, 1),
         ("concat", False, 1), ("dot", False, 2)]


@pytest.mark.parametrize("kind,bidi,layers", KINDS)
def test_forward_shapes_padding_and_gradients(kind, bidi, layers):
    m = model(kind, bidi, layers)
    src, mask, tgt = data()
    logits = m(src, tgt, mask)
    assert logits.shape == (5, tgt.shape[1], V)
    same, w = m(src, tgt, mask, return_attention=True)
    assert torch.equal(same, logits)
    if kind == "plain":
        assert w is None
    else:
        assert w.shape == (5, tgt.shape[1], src.shape[1])
        assert (w[~mask[:, None, :].expand_as(w)] == 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(5, tgt.shape[1]))
    logits.sum().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


@pytest.mark.parametrize("kind,bidi,layers", KINDS)
def test_the_teacher_forced_pass_equals_decoding_one_step_at_a_time(kind, bidi, layers):
    """The fast path (one nn.LSTM call, or the lean attention loop) against the loop of decode_step, with gradients."""
    src, mask, tgt = data()
    fast_model, slow_model = model(kind, bidi, layers, seed=1), model(kind, bidi, layers, seed=1)
    fast, w_fast = fast_model(src, tgt, mask, return_attention=True)
    slow, w_slow = step_by_step(slow_model, src, mask, tgt)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=0)
    if w_fast is not None:
        torch.testing.assert_close(w_fast, w_slow, atol=1e-6, rtol=0)
    loss = lambda logits: torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten())  # noqa: E731
    loss(fast).backward()
    loss(slow).backward()
    for (name, p), q in zip(fast_model.named_parameters(), slow_model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(["plain", "additive", "general"]), layers=st.integers(1, 2), bidi=st.booleans(),
       B=st.integers(1, 4), T=st.integers(1, 6), seed=st.integers(0, 1000), data=st.data())
def test_hypothesis_teacher_forced_equals_step_by_step(kind, layers, bidi, B, T, seed, data):
    m = model(kind, bidi, layers, seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    lengths = data.draw(st.lists(st.integers(1, 5), min_size=B, max_size=B))
    src = torch.randint(3, V, (B, 5), generator=g)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    src = src.masked_fill(~mask, 0)
    tgt = torch.randint(3, V, (B, T), generator=g)
    with torch.no_grad():
        torch.testing.assert_close(m(src, tgt), step_by_step(m, src, None, tgt)[0], atol=1e-5, rtol=0)


def test_the_decoder_lstm_step_is_torch_lstm_cell_and_the_whole_pass_is_torch_lstm():
    """Against PyTorch: each layer of a decoder step is nn.LSTMCell with the layer's weights; the plain decoder's
    teacher-forced pass is nn.LSTM over the embedded inputs."""
    torch.manual_seed(0)
    dec = Decoder(V, 8, 16, num_layers=2)
    x, h, c = torch.randn(3, 8), torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    hs, cs = dec.lstm_step(x, h.unbind(0), c.unbind(0))
    below = x
    for i in range(2):
        cell = nn.LSTMCell(8 if i == 0 else 16, 16)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(cell, name).copy_(getattr(dec.rnn, f"{name}_l{i}"))
        want_h, want_c = cell(below, (h[i], c[i]))
        torch.testing.assert_close(hs[i], want_h, atol=1e-6, rtol=0)
        torch.testing.assert_close(cs[i], want_c, atol=1e-6, rtol=0)
        below = want_h
    inputs = torch.randint(3, V, (3, 5))
    reference = nn.LSTM(8, 16, 2, batch_first=True)
    reference.load_state_dict(dec.rnn.state_dict())
    out, _ = reference(dec.embedding(inputs), (h, c))
    logits, weights = dec(inputs, dec.init_state(None, (h, c), None))  # teacher forcing: one nn.LSTM call
    torch.testing.assert_close(logits, dec.out(out), atol=1e-6, rtol=0)
    assert weights is None


def test_padding_is_ignored_and_the_default_mask_is_the_pad_id():
    m = model("additive", bidirectional=True)
    src, mask, tgt = data()
    a = m(src, tgt, mask)
    torch.testing.assert_close(a, m(src, tgt))  # None: src != pad_id
    d = m(torch.cat([src, torch.zeros(5, 3, dtype=torch.long)], 1), tgt)  # extra padding columns change nothing
    torch.testing.assert_close(a, d)
    n = int(mask[1].sum())  # one sequence alone gives the same result as inside the batch
    torch.testing.assert_close(m(src[1:2, :n], tgt[1:2])[0], a[1], atol=1e-5, rtol=0)


def test_a_batch_without_padding_does_no_masking_work_and_gets_the_same_result():
    m = model("additive")
    src = torch.randint(3, V, (4, 6), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(3, V, (4, 5), generator=torch.Generator().manual_seed(1))
    assert m.encode(src).src_key_padding_mask is None  # nothing padded: the decoder skips the masking
    mask = torch.ones(4, 6, dtype=torch.bool)
    assert m.encode(src, mask).src_key_padding_mask is None
    torch.testing.assert_close(m(src, tgt, mask), m(src, tgt), atol=0, rtol=0)
    padded = torch.cat([src, torch.zeros(4, 2, dtype=torch.long)], 1)
    assert m.encode(padded).src_key_padding_mask.shape == (4, 8)


def test_a_custom_attention_module_or_a_hook_is_called_as_itself():
    """The lean loop calls the library's own modules through attend; anything else keeps its own forward."""
    m = model("additive", seed=2)
    src, mask, tgt = data()
    want = m(src, tgt, mask)
    calls = []

    class Logged(AdditiveAttention):
        def forward(self, query, keys, key_padding_mask=None, keys_proj=None, need_weights=True):
            calls.append(query.shape)
            return super().forward(query, keys, key_padding_mask, keys_proj, need_weights)

    logged = Logged(16, 16, 12)
    logged.load_state_dict(m.decoder.attention.state_dict())
    m.decoder.attention = logged
    torch.testing.assert_close(m(src, tgt, mask), want, atol=1e-6, rtol=0)
    assert len(calls) == tgt.shape[1]
    m.decoder.attention = AdditiveAttention(16, 16, 12)
    m.decoder.attention.load_state_dict(logged.state_dict())
    handle = m.decoder.attention.register_forward_hook(lambda mod, args, out: calls.append("hook"))
    m(src, tgt, mask)
    handle.remove()
    assert calls.count("hook") == tgt.shape[1]


@pytest.mark.parametrize("kind,layers", [("plain", 1), ("plain", 2), ("additive", 1)])
def test_scheduled_sampling_feeds_gold_or_predicted_tokens_as_drawn(kind, layers):
    m = model(kind, layers=layers, seed=3).eval()
    src, mask, tgt = data()
    with torch.no_grad():
        got = m(src, tgt, mask, teacher_forcing=0.5, generator=torch.Generator().manual_seed(7))
        again = m(src, tgt, mask, teacher_forcing=0.5, generator=torch.Generator().manual_seed(7))
        assert torch.equal(got, again) and not torch.equal(got, m(src, tgt, mask))  # some rows read predictions
        gold = torch.rand(tgt.shape[1], 5, generator=torch.Generator().manual_seed(7)) < 0.5  # the same draws
        state, token, want = m.encode(src, mask), torch.full((5,), m.bos_id), []
        for t in range(tgt.shape[1]):
            if t > 0:
                token = torch.where(gold[t], tgt[:, t - 1], want[-1].argmax(-1))
            step_logits, state, _ = m.decode_step(token, state)
            want.append(step_logits)
    torch.testing.assert_close(got, torch.stack(want, 1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("teacher_forcing", [0.0, 0.6])
def test_the_plain_decoders_two_passes_give_the_gradients_of_one_pass_step_by_step(teacher_forcing):
    """Scheduled sampling in a plain decoder: choose the tokens without gradients, then one nn.LSTM call over them.
    Same logits and same gradients as the one pass that steps the LSTM and keeps the graph."""
    src, mask, tgt = data()
    two, one = model("plain", layers=2, seed=5), model("plain", layers=2, seed=5)
    state_two, state_one = two.encode(src, mask), one.encode(src, mask)
    inputs = shift_right(tgt, two.bos_id)
    logits_two, _ = two.decoder(inputs, state_two, teacher_forcing, torch.Generator().manual_seed(1))
    logits_one = one.decoder._loop(inputs, state_one, teacher_forcing, torch.Generator().manual_seed(1))[0]
    torch.testing.assert_close(logits_two, logits_one, atol=1e-5, rtol=0)
    logits_two.square().sum().backward()
    logits_one.square().sum().backward()
    for (name, p), q in zip(two.named_parameters(), one.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_with_dropout_between_layers_scheduled_sampling_chooses_under_the_masks_it_learns_from():
    """Training with dropout: one pass step by step (the two passes would draw different masks)."""
    src, mask, tgt = data()
    m = model("plain", layers=2, seed=6, dropout=0.5).train()
    calls = []
    original = m.decoder._loop
    m.decoder._loop = lambda *a, **k: calls.append(torch.is_grad_enabled()) or original(*a, **k)
    m(src, tgt, mask, teacher_forcing=0.5)
    m.eval()
    m(src, tgt, mask, teacher_forcing=0.5)
    assert calls == [True, False]  # training: the graded pass itself; eval: the no-grad first pass


def test_teacher_forcing_zero_feeds_its_own_predictions_like_greedy_decoding():
    m = model("additive")
    src, mask, tgt = data()
    free, w_free = m(src, tgt, mask, return_attention=True, teacher_forcing=0.0)
    greedy, w_greedy = greedy_decode(m, src, mask, max_len=tgt.shape[1], return_attention=True)
    first_eos = (greedy == m.eos_id).float().argmax(1)
    for i in range(5):  # identical until each sequence's eos (after it greedy pads)
        n = int(first_eos[i]) + 1 if (greedy[i] == m.eos_id).any() else greedy.shape[1]
        assert torch.equal(free[i, :n].argmax(-1), greedy[i, :n])
        torch.testing.assert_close(w_free[i, :n], w_greedy[i, :n])


@pytest.mark.parametrize("row", [[0, 1, 1, 1], [1, 0, 1, 0]], ids=["left padding", "a gap"])
def test_masks_the_encoder_cannot_read_are_refused(row):
    """The encoder reads the first mask.sum() tokens of each row; with left padding or gaps those are the wrong tokens."""
    m = model("additive")
    src = torch.tensor([[4, 5, 6, 2], [4, 5, 6, 2]])
    mask = torch.tensor([[1, 1, 1, 1], row], dtype=torch.bool)
    message = rf"row 1 of src_key_padding_mask is {re.escape(str(row))}: the real tokens must come first"
    with pytest.raises(ValueError, match=message):
        m(src, src, mask)
    with pytest.raises(ValueError, match=r"row 1 of src_key_padding_mask"):
        greedy_decode(m, src, mask)
    with pytest.raises(ValueError, match=r"row 1 of src != pad_id \(0\) is"):
        m.encode(src.masked_fill(~mask, m.pad_id))  # the same layout written with pad tokens, and no mask


def test_bad_inputs_raise_value_errors_naming_what_arrived():
    m = model()
    src, mask, tgt = data()
    with pytest.raises(ValueError, match="must match"):
        Seq2Seq(Encoder(V, 8, 16), Decoder(V, 8, 32))
    with pytest.raises(ValueError, match="key_dim=16 but the decoder needs key_dim=32"):
        AttentionDecoder(V, 8, 16, 32, AdditiveAttention(16, 16, 8))
    with pytest.raises(ValueError, match="enc_dim=16 but the encoder outputs 32"):
        Seq2Seq(Encoder(V, 8, 16, bidirectional=True), AttentionDecoder(V, 8, 16, 16, AdditiveAttention(16, 16, 8)))
    with pytest.raises(ValueError, match=r"src has shape \(5, 7\) but tgt has shape \(2, 7\); the batch sizes must match"):
        m(src, tgt[:2], mask)
    with pytest.raises(ValueError, match=r"every source needs at least one real token; lengths are \[0, 0, 0, 0, 0\]"):
        m(src, tgt, torch.zeros_like(mask))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must have dtype torch.bool"):
        m(src, tgt, mask.sum(1))  # lengths are not a padding mask
    with pytest.raises(ValueError, match=r"src_key_padding_mask has shape \(5, 3\) but it must be src's shape"):
        m(src, tgt, mask[:, :3])
    with pytest.raises(ValueError, match=r"teacher_forcing must be a number between 0 and 1, got 1.5"):
        m(src, tgt, mask, teacher_forcing=1.5)
    with pytest.raises(ValueError, match=r"tgt must hold integer token ids, got dtype torch.float32"):
        m(src, tgt.float(), mask)
    with pytest.raises(ValueError, match=r"src must be 2-D, but it has shape \(7,\)"):
        m.encode(src[0])


@pytest.mark.parametrize("kind,bidi,layers", [("plain", False, 1), ("plain", True, 2), ("additive", True, 2),
                                              ("general", False, 1), ("concat", True, 1), ("dot", False, 1)])
def test_save_load_round_trip_gives_identical_outputs(tmp_path, kind, bidi, layers):
    m = model(kind, bidi, layers, seed=3, dropout=0.25)  # a non-default setting must survive the trip
    d = make_reversal(5, (3, 7), seed=0)
    path = tmp_path / "m.pt"
    save_seq2seq(m, path, src_vocab=d.src_vocab, tgt_vocab=d.tgt_vocab, test_acc=0.5, task={"name": "reversal"})
    blob = torch.load(path, weights_only=True)  # plain types only: the attnlib.checkpoint format
    assert set(blob) == {"config", "state_dict", "extra"}
    loaded, extra = load_seq2seq(path)
    assert not loaded.training and loaded.decoder.dropout == 0.25
    assert type(loaded.decoder) is type(m.decoder) and loaded.config == m.config
    assert extra["test_acc"] == 0.5 and extra["task"] == {"name": "reversal"}
    assert extra["src_vocab"].itos == d.src_vocab.itos and extra["tgt_vocab"].stoi == d.tgt_vocab.stoi
    m.eval()
    with torch.no_grad():
        want_logits, want_w = m(d.src, d.tgt, d.src_key_padding_mask, return_attention=True)
        got_logits, got_w = loaded(d.src, d.tgt, d.src_key_padding_mask, return_attention=True)
        assert torch.equal(want_logits, got_logits)
        assert (want_w is None and got_w is None) or torch.equal(want_w, got_w)
        assert torch.equal(greedy_decode(m, d.src), greedy_decode(loaded, d.src))
        other = model(kind, bidi, layers, seed=4).eval()  # a different model really differs: the weights were loaded
        assert not torch.allclose(other(d.src, d.tgt), got_logits)


def test_save_without_vocabs_and_an_attention_it_cannot_describe(tmp_path):
    m = model("additive")
    m.save(tmp_path / "m.pt")
    _, extra = Seq2Seq.load(tmp_path / "m.pt")
    assert extra == {"src_vocab": None, "tgt_vocab": None}

    class Custom(torch.nn.Module):
        query_dim, key_dim = 16, 16

        def forward(self, query, keys, key_padding_mask=None):
            return keys.mean(1), torch.full(keys.shape[:2], 1.0 / keys.shape[1])

    odd = Seq2Seq(Encoder(V, 8, 16), AttentionDecoder(V, 8, 16, 16, Custom()))
    with pytest.raises(ValueError, match="AdditiveAttention or LuongAttention, got Custom"):
        save_seq2seq(odd, tmp_path / "odd.pt")
    src, mask, tgt = data()
    assert odd(src, tgt, mask).shape == (5, tgt.shape[1], V)  # a module without project_keys still decodes
