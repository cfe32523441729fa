"""Notebook 10's checkers: each rejects the mistakes learners make and accepts the right answer."""
from __future__ import annotations

import pytest
import torch

from attnlib import greedy_decode
from attnlib.seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig
from attnlib.exercises import check

TGT = torch.tensor([[5, 6, 7, 2, 0], [8, 9, 2, 0, 0], [3, 4, 5, 6, 2]])  # targets end with <eos> = 2, pad = 0
RIGHT_TGT_IN = torch.tensor([[1, 5, 6, 7, 2], [1, 8, 9, 2, 0], [1, 3, 4, 5, 6]])


@pytest.mark.parametrize("wrong, says", [
    (TGT, "the target itself"),
    (torch.cat([TGT[:, 1:], torch.zeros(3, 1, dtype=torch.long)], 1), "shifted left"),
    (torch.cat([torch.ones(3, 1, dtype=torch.long), TGT], 1), "one too long"),
    (TGT[:, :-1], "one too short"),
    (torch.cat([torch.full((3, 1), 2), TGT[:, :-1]], 1), "must start with <bos>"),
    ("1 5 6 7 2", "TypeError"),
    (RIGHT_TGT_IN.float(), "integers"),  # the right values, but not ids an embedding can look up
])
def test_10_1_rejects_typical_mistakes(wrong, says):
    verdict = check("10.1", wrong, quiet=True, tgt=TGT)
    assert verdict.ok is False and says in verdict.message


def test_10_1_accepts_the_shifted_target():
    assert check("10.1", RIGHT_TGT_IN, quiet=True, tgt=TGT)
    assert check("10.1", RIGHT_TGT_IN.tolist(), quiet=True, tgt=TGT)  # a nested list is fine too
    assert check("10.1", None, quiet=True, tgt=TGT).ok is None


SRC = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])
REAL = SRC != 0


@pytest.mark.parametrize("wrong, says", [
    (~REAL[:, None, None, :], "polarity is inverted"),
    (REAL, "this is the key_padding_mask"),  # right values, the 2-D form: not what the exercise asks for
    (REAL.T, "read as (Lq, Lk)"),
    (REAL[:, None, :, None], "query axis"),
    (REAL[:, None, None, :].float(), "dtype"),
    (torch.ones(2, 1, 1, 4, dtype=torch.bool), "sequence 1 has 2 real tokens"),
    (REAL[:, None, None, :3], "does not broadcast"),
])
def test_10_2_rejects_typical_mistakes(wrong, says):
    verdict = check("10.2", wrong, quiet=True, src=SRC)
    assert verdict.ok is False and says in verdict.message


@pytest.mark.parametrize("heads", [2, 4])  # 2 = B, as in the notebook: then the wrong shape broadcasts
def test_10_2_says_when_the_batch_sits_on_the_heads_axis(heads):
    verdict = check("10.2", REAL[None, :, None, :], quiet=True, src=SRC, num_heads=heads)
    assert verdict.ok is False and "where the heads go" in verdict.message, verdict.message


def test_10_2_describes_the_broadcast_mask_of_a_one_row_answer():
    """A (1, 1, 1, Ls) mask is sequence 0's for every sequence: the message lists what sequence 1 may really see."""
    verdict = check("10.2", REAL[:1, None, None, :], quiet=True, src=SRC, num_heads=2)
    assert verdict.ok is False, verdict.message
    assert "sequence 1 has 2 real tokens" in verdict.message and "[0, 1, 2, 3]" in verdict.message, verdict.message
    assert "raised" not in verdict.message and "one row for the whole batch" in verdict.message, verdict.message


def test_10_2_accepts_the_key_padding_mask():
    assert check("10.2", REAL[:, None, None, :], quiet=True, src=SRC)
    assert check("10.2", (SRC != 0).view(2, 1, 1, 4), quiet=True, src=SRC)


def cached_greedy(model, src, src_key_padding_mask=None, max_len=11, cross_once=True, positions=True, pad_mask=True,
                  use_kvcache=True, values_once=True, pad_after_eos=True, by_hand_each_step=None, scale=True):
    """The exercise's solution; the keywords switch on the mistakes learners make."""
    import math

    import torch.nn.functional as F
    from attnlib import KVCache

    state = model.encode(src, src_key_padding_mask)
    memory, real = state.memory, state.src_key_padding_mask
    keys_ok = None if (real is None or not pad_mask) else real[:, None, None, :]  # (B, 1, 1, Ls)

    def project(block):
        a = block.cross_attn
        if by_hand_each_step == "linear":  # the module's weights, without calling the module
            return (a.split_heads(F.linear(memory, a.w_k.weight, a.w_k.bias)),
                    a.split_heads(F.linear(memory, a.w_v.weight, a.w_v.bias)))
        if by_hand_each_step == "matmul":
            return (a.split_heads(memory @ a.w_k.weight.T + a.w_k.bias),
                    a.split_heads(memory @ a.w_v.weight.T + a.w_v.bias))
        return a.split_heads(a.w_k(memory)), a.split_heads(a.w_v(memory))

    cross_kv = [project(block) for block in model.decoder]
    caches = [KVCache(max_len) for _ in model.decoder]
    past = [None] * len(model.decoder)  # the by-hand cache (torch.cat), the other right answer
    token = torch.full((src.shape[0],), model.bos_id)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    ids = []
    for t in range(max_len):
        x = model.tgt_embed(token)[:, None] * (math.sqrt(model.config.d_model) if scale else 1.0) \
            + model.pos.pe[t if positions else 0]
        for i, block in enumerate(model.decoder):
            k, v = cross_kv[i] if (cross_once and not by_hand_each_step) else project(block)
            if not values_once:  # the keys kept, the values projected again at every step
                v = block.cross_attn.split_heads(block.cross_attn.w_v(memory))
            if use_kvcache:
                a, _ = block.self_attn(x, x, x, need_weights=False, cache=caches[i])
            else:
                past[i] = x if past[i] is None else torch.cat([past[i], x], 1)
                a, _ = block.self_attn(x, past[i], past[i], need_weights=False)
            x = block.norm1(x + a)
            q = block.cross_attn.split_heads(block.cross_attn.w_q(x))
            c = F.scaled_dot_product_attention(q, k, v, attn_mask=keys_ok)
            x = block.norm2(x + block.cross_attn.w_o(block.cross_attn.merge_heads(c)))
            x = block.norm3(x + block.ff(x))
        token = model.head(model.final_norm(x))[:, -1].argmax(-1)
        ids.append(token.masked_fill(done, model.pad_id) if pad_after_eos else token)
        done |= token == model.eos_id
        if bool(done.all()):
            break
    return torch.stack(ids, 1)


@pytest.fixture(scope="module")
def model_and_batch():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqTransformerConfig(12, 10, d_model=16, num_heads=2, num_encoder_layers=1,
                                                        num_decoder_layers=2, d_ff=32)).eval()
    src = torch.randint(3, 12, (6, 9))
    src[0, 4:] = 0  # two padded rows: the cross-attention must skip their pads
    src[3, 6:] = 0
    return model, src, src != 0


def test_10_3_accepts_a_cached_decoder(model_and_batch):
    model, src, real = model_and_batch
    fn = lambda m, s, r, n: cached_greedy(m, s, r, n)
    verdict = check("10.3", fn, quiet=True, model=model, src=src, src_key_padding_mask=real, max_len=8)
    assert verdict.ok, verdict.message
    assert "memory in 4 matrix products" in verdict.message, verdict.message  # 2 layers: keys and values, once
    assert check("10.3", None, quiet=True, model=model, src=src).ok is None


@pytest.mark.parametrize("wrong, says", [
    (lambda m, s, r, n: greedy_decode(m, s, r, max_len=n), "recomputes the prefix"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, cross_once=False), "once per layer, before the loop"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, positions=False), "differs from greedy decoding"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, pad_mask=False), "cross-attention reads the source's pads"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n).tolist(), "expected ids of shape"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, use_kvcache=False), "recomputes the prefix's keys and values"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, values_once=False), "values were projected from the memory"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, pad_after_eos=False), "goes on after its <eos>"),
    # the memory projected again at every step without calling w_k / w_v: the module hooks cannot see it
    (lambda m, s, r, n: cached_greedy(m, s, r, n, by_hand_each_step="linear"), "went through"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, by_hand_each_step="matmul"), "went through"),
    (lambda m, s, r, n: cached_greedy(m, s, r, n, scale=False), "√d_model"),
    ([5, 3, 7, 2], "expected a function"),
])
def test_10_3_rejects_typical_mistakes(model_and_batch, wrong, says):
    model, src, real = model_and_batch
    verdict = check("10.3", wrong, quiet=True, model=model, src=src, src_key_padding_mask=real, max_len=8)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_10_3_blames_the_pads_only_when_they_are_the_mistake(model_and_batch):
    """Every row padded, as in the notebook (63 of its 64 dates): a wrong position gets the position hint."""
    model, src, _ = model_and_batch
    src = src.clone()
    src[:, 7:] = 0
    real = src != 0
    wrong = lambda m, s, r, n: cached_greedy(m, s, r, n, positions=False)
    verdict = check("10.3", wrong, quiet=True, model=model, src=src, src_key_padding_mask=real, max_len=8)
    assert verdict.ok is False and "position" in verdict.message and "pads" not in verdict.message, verdict.message
    both = lambda m, s, r, n: cached_greedy(m, s, r, n, positions=False, pad_mask=False)
    verdict = check("10.3", both, quiet=True, model=model, src=src, src_key_padding_mask=real, max_len=8)
    assert verdict.ok is False and "pads" not in verdict.message, verdict.message
    pads = lambda m, s, r, n: cached_greedy(m, s, r, n, pad_mask=False)
    verdict = check("10.3", pads, quiet=True, model=model, src=src, src_key_padding_mask=real, max_len=8)
    assert verdict.ok is False and "reads the source's pads" in verdict.message, verdict.message
