"""Tests of attnlib/seq2seq_transformer.py: teacher forcing in one pass against decoding step by step, padding,
the shared seq2seq protocol (encode, decode_step, return_attention), errors, save/load, and a short training run."""
import pytest
import torch

from attnlib import evaluate, make_dates, sequence_loss, train_seq2seq
from attnlib.seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig

ATOL = 1e-5


def small_model(seed=0, **kw):
    torch.manual_seed(seed)
    config = Seq2SeqTransformerConfig(src_vocab_size=20, tgt_vocab_size=9, d_model=16, num_heads=2, d_ff=32,
                                      max_len=16, **kw)
    return Seq2SeqTransformer(config).eval()


def padding(lengths, L):
    return torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]  # (B, L) True = real


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = padding([8, 5, 3], 8)
    src = torch.randint(3, 20, (3, 8), generator=g).masked_fill(~keep, 0)
    return src, keep, torch.randint(3, 9, (3, 6), generator=g)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_one_pass_logits_equal_decode_step_one_token_at_a_time(norm_first):
    """Teacher forcing in one pass: position t of the full pass equals decode_step on the prefix 0..t."""
    model = small_model(norm_first=norm_first)
    src, keep, tgt = inputs()
    with torch.no_grad():
        full, cross = model(src, tgt, keep, return_attention=True)  # (3, 6, 9), per layer (3, 2, 6, 8)
        state = model.encode(src, keep)
        for t, token in enumerate(model.shift_right(tgt).unbind(1)):
            step, state, weights = model.decode_step(token, state)
            torch.testing.assert_close(full[:, t], step, atol=ATOL, rtol=0)
            for layer, w in zip(cross, weights):
                torch.testing.assert_close(layer[:, :, t], w, atol=1e-6, rtol=0)
    assert state.prefix.shape == (3, 6) and torch.equal(state.prefix, model.shift_right(tgt))


def test_forward_is_decode_of_the_shifted_target_over_the_encoded_source():
    model = small_model(seed=1)
    src, keep, tgt = inputs(1)
    with torch.no_grad():
        state = model.encode(src, keep)
        logits, self_maps, cross_maps = model.decode(model.shift_right(tgt), state.memory, keep, return_attention=True)
        torch.testing.assert_close(model(src, tgt, keep), logits, atol=ATOL, rtol=0)  # the fused path, without maps
        assert [m.shape for m in self_maps] == [(3, 2, 6, 6)] * 2 and [m.shape for m in cross_maps] == [(3, 2, 6, 8)] * 2
        assert all((m[:, :, 0, 1:] == 0).all() for m in self_maps)  # causal: position 0 sees itself only
        assert all((m.masked_select(~keep[:, None, None, :]) == 0).all() for m in cross_maps)
    assert torch.equal(model.shift_right(tgt)[:, 0], torch.full((3,), model.bos_id))
    assert torch.equal(model.shift_right(tgt)[:, 1:], tgt[:, :-1])


def test_padding_the_source_changes_nothing_and_the_default_mask_is_the_pad_id():
    model = small_model()
    src = torch.tensor([[5, 6, 7, 2]])
    padded = torch.tensor([[5, 6, 7, 2, 0, 0, 0]])
    tgt = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), model(padded, tgt), atol=1e-6, rtol=0)
        torch.testing.assert_close(model(padded, tgt), model(padded, tgt, padded != 0), atol=0, rtol=0)
    assert model.encode(src).src_key_padding_mask is None  # nothing padded: no masking work
    assert torch.equal(model.encode(padded).src_key_padding_mask, padded != 0)


def test_training_mode_is_restored_and_the_ids_match_the_protocol():
    model = small_model(dropout=0.1).train()
    assert (model.bos_id, model.eos_id, model.pad_id) == (1, 2, 0)
    from attnlib import greedy_decode

    greedy_decode(model, torch.tensor([[4, 5, 2]]), max_len=3)
    assert model.training


def test_bad_inputs_raise_value_errors_naming_the_shapes():
    model = small_model()
    with pytest.raises(ValueError, match=r"src has shape \(2, 4\) but tgt has shape \(3, 4\); the batch sizes must match"):
        model(torch.ones(2, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tgt_in has shape \(1, 17\) but max_len is 16"):
        model(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src must hold integer token ids, got dtype torch.float32"):
        model.encode(torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"src_key_padding_mask has shape \(1, 5\) but it must be src's shape"):
        model.encode(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must have dtype torch.bool"):
        model.encode(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 4))
    memory = model.encode(torch.ones(2, 4, dtype=torch.long)).memory
    with pytest.raises(ValueError, match=r"tgt_in has shape \(3, 2\) but memory has shape \(2, 4, 16\)"):
        model.decode(torch.ones(3, 2, dtype=torch.long), memory)
    with pytest.raises(ValueError, match=r"src_key_padding_mask has shape \(2, 5\) but it must be memory's \(B, Ls\)"):
        model.decode(torch.ones(2, 2, dtype=torch.long), memory, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"logits has shape \(2, 3, 9\) but tgt has shape \(2, 4\)"):
        sequence_loss(torch.zeros(2, 3, 9), torch.zeros(2, 4, dtype=torch.long))


def test_save_and_load_give_the_same_model_in_the_seq2seq_format(tmp_path):
    from attnlib import greedy_decode

    model = small_model(seed=4, norm_first=True)
    data = make_dates(3, seed=0)
    path = tmp_path / "m.pt"
    model.save(path, src_vocab=data.src_vocab, tgt_vocab=data.tgt_vocab, note="hello", accuracy=0.5)
    assert set(torch.load(path, weights_only=True)) == {"config", "state_dict", "extra"}  # plain types only
    loaded, extra = Seq2SeqTransformer.load(path)
    assert extra["note"] == "hello" and extra["accuracy"] == 0.5 and not loaded.training
    assert extra["src_vocab"].itos == data.src_vocab.itos and extra["tgt_vocab"].itos == data.tgt_vocab.itos
    assert loaded.config == model.config
    src = torch.randint(3, 20, (2, 5), generator=torch.Generator().manual_seed(2))
    assert torch.equal(greedy_decode(model, src, max_len=6), greedy_decode(loaded, src, max_len=6))


def test_a_short_training_run_learns_dates():
    """A short run of train_seq2seq on the date task must lower the loss a lot and decode above chance."""
    data = make_dates(512, seed=0)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqTransformerConfig(len(data.src_vocab), len(data.tgt_vocab), d_model=32,
                                                        num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                                        d_ff=64))
    history = train_seq2seq(model, data, epochs=6, lr=1e-2, batch_size=64, weight_decay=0.01, progress=False)
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    assert evaluate(model, data)["token_acc"] > 0.3  # chance over the 11 digits/hyphen is about 0.1
    with pytest.raises(ValueError, match=r"Seq2SeqTransformer always reads the gold target \(teacher forcing 1.0\)"):
        train_seq2seq(model, data, epochs=1, teacher_forcing=0.5, progress=False)
