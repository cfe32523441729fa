"""Notebook 10's checkers: each rejects the mistakes learners make and accepts the right answer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib import greedy_decode
from attnlib.seq2seq_transformer import Seq2SeqTransformer, Seq2SeqTransformerConfig
from attnlib.exercises import check

def padded_batch(model, src, seqs, eos=True, eos_last=False, pad_id=None, bos_in_tgt=False, width=None,
                 tgt_in="shift", loss="right"):
    """Exercise 1's solution; the keywords switch on the mistakes learners make."""
    pad = model.pad_id if pad_id is None else pad_id
    rows = [list(s) + ([model.eos_id] if eos and not eos_last else []) for s in seqs]
    L = max(len(r) for r in rows) + (1 if eos_last else 0) if width is None else width(seqs)
    tgt = torch.full((len(rows), L), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        tgt[i, : len(r)] = torch.tensor(r)
        if eos_last:
            tgt[i, -1] = model.eos_id
    if bos_in_tgt:
        tgt = torch.cat([torch.full((len(rows), 1), model.bos_id), tgt], 1)
    bos = torch.full((len(rows), 1), model.bos_id)
    inputs = {"shift": torch.cat([bos, tgt[:, :-1]], 1),
              "unpadded": torch.cat([bos, torch.tensor([s + [model.pad_id] * (L - 1 - len(s)) for s in seqs])], 1)
              if L - 1 >= max(map(len, seqs)) else None,  # <bos> + the sequence, then pads: right as well
              "itself": tgt, "left": torch.cat([tgt[:, 1:], torch.full((len(rows), 1), model.pad_id)], 1),
              "eos_first": torch.cat([torch.full((len(rows), 1), model.eos_id), tgt[:, :-1]], 1),
              "one_longer": torch.cat([bos, tgt], 1)}[tgt_in]
    logits = model.decode(inputs if tgt_in != "one_longer" else inputs[:, :-1], model.encode(src).memory)
    nll = -logits.log_softmax(-1).gather(-1, tgt[..., None])[..., 0] if tgt.shape == logits.shape[:2] else None
    real = tgt != model.pad_id
    losses = {"right": lambda: nll[real].mean(), "pads": lambda: nll.mean(),
              "no_eos": lambda: nll[real & (tgt != model.eos_id)].mean(),
              "per_sequence": lambda: ((nll * real).sum(1) / real.sum(1)).mean(),
              "sum": lambda: nll[real].sum(), "sign": lambda: -nll[real].mean(),
              "input_mask": lambda: nll[inputs != model.pad_id].mean(),
              "raw_logits": lambda: (-logits.gather(-1, tgt[..., None])[..., 0])[real].mean(),
              "unshifted": lambda: (-model.decode(tgt, model.encode(src).memory).log_softmax(-1)
                                    .gather(-1, tgt[..., None])[..., 0])[real].mean(),
              "double_shift": lambda: (-logits[:, :-1].log_softmax(-1).gather(-1, tgt[:, 1:, None])[..., 0])
              [real[:, 1:]].mean(),
              "gather_input": lambda: (-logits.log_softmax(-1).gather(-1, inputs[..., None])[..., 0])[real].mean(),
              "sum_over_B": lambda: nll[real].sum() / len(seqs), "sum_over_BL": lambda: nll[real].sum() / tgt.numel(),
              "sum_over_12": lambda: nll[real].sum() / 12,  # the notebook batch's real-token count, typed in
              "probs": lambda: -logits.softmax(-1).gather(-1, tgt[..., None])[..., 0][real].mean(),
              "int": lambda: int(nll[real].mean()),
              "float": lambda: float(nll[real].mean()), "vector": lambda: nll[real],
              "numpy": lambda: nll[real].mean().detach().numpy(),  # a 0-d array
              "np_float32": lambda: np.float32(nll[real].mean().item()),
              "numpy_vector": lambda: nll[real].detach().numpy()}
    return tgt, inputs, losses[loss]() if nll is not None else torch.tensor(0.0)


@pytest.fixture(scope="module")
def tiny_and_batch():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqTransformerConfig(20, 12, d_model=16, num_heads=2, num_encoder_layers=1,
                                                        num_decoder_layers=2, d_ff=32)).eval()
    seqs = [[7, 4, 9], [5, 11, 3, 8, 6], [10]]  # as in the notebook: the longest is not the first
    return model, torch.randint(3, 20, (3, 9), generator=torch.Generator().manual_seed(0)), seqs


@pytest.mark.parametrize("options", [{}, {"tgt_in": "unpadded"}, {"loss": "float"}, {"loss": "numpy"},
                                     {"loss": "np_float32"}, {"tgt_in": "unpadded", "loss": "numpy"}])
def test_10_1_accepts_the_padded_batch(tiny_and_batch, options):
    model, src, seqs = tiny_and_batch
    verdict = check("10.1", lambda m, s, q: padded_batch(m, s, q, **options), quiet=True, seqs=seqs, model=model,
                    src=src)
    assert verdict.ok, verdict.message
    assert check("10.1", None, quiet=True, seqs=seqs, model=model, src=src).ok is None


@pytest.mark.parametrize("options, says", [
    (dict(eos=False), "has no <eos>"),
    (dict(eos=False, width=lambda q: max(map(len, q)) + 1), "row 0 has no <eos>"),
    (dict(eos=False, eos_last=True), "after the pads"),
    (dict(pad_id=2), "other than the pad id"),
    (dict(bos_in_tgt=True), "starts with <bos>"),
    (dict(width=lambda q: len(q[0]) + 1), "L must fit every sequence"),  # row 0's width: a longer row does not fit
    (dict(width=lambda q: max(map(len, q)) + 2), "no longer"),
    (dict(tgt_in="itself"), "the target itself"),
    (dict(tgt_in="left"), "shifted left"),
    (dict(tgt_in="eos_first"), "must start with <bos>"),
    (dict(tgt_in="one_longer"), "one input per target position"),
    (dict(loss="pads"), "counts the pad positions"),
    (dict(tgt_in="unpadded", loss="pads"), "counts the pad positions"),  # slips computed on the learner's tgt_in
    (dict(tgt_in="unpadded", loss="per_sequence"), "averages each sequence first"),
    (dict(loss="input_mask"), "picked from the decoder input"),
    (dict(loss="no_eos"), "leaves out the <eos> positions"),
    (dict(loss="per_sequence"), "averages each sequence first"),
    (dict(loss="sum"), "not their mean"),
    (dict(loss="sign"), "wrong sign"),
    (dict(loss="raw_logits"), "log_softmax"),
    (dict(loss="unshifted"), "the target itself fed as the decoder input"),
    (dict(loss="double_shift"), "shifts a second time"),
    (dict(loss="gather_input"), "own input token"),
    (dict(loss="sum_over_B"), "number of sequences"),
    (dict(loss="sum_over_BL"), "pads included"),
    (dict(loss="vector"), "one number"),
    (dict(loss="numpy_vector"), "got an array of shape"),
])
def test_10_1_rejects_typical_mistakes(tiny_and_batch, options, says):
    model, src, seqs = tiny_and_batch
    verdict = check("10.1", lambda m, s, q: padded_batch(m, s, q, **options), quiet=True, seqs=seqs, model=model,
                    src=src)
    assert verdict.ok is False and says in verdict.message, verdict.message


def test_10_1_runs_a_reordered_batch_too(tiny_and_batch):
    """A width read off the longest row of the notebook's batch (row 1) fails once the rows move."""
    model, src, seqs = tiny_and_batch
    wrong = lambda m, s, q: padded_batch(m, s, q, width=lambda r: len(r[1]) + 1)
    verdict = check("10.1", wrong, quiet=True, seqs=seqs, model=model, src=src)
    assert verdict.ok is False and verdict.message.startswith("on the same sequences moved up one row"), \
        verdict.message


def hard_coded(model, src, seqs):
    """The solution with B, L = 3, 6 read off the notebook's batch by eye."""
    B, L = 3, 6
    tgt = torch.full((B, L), model.pad_id)
    tgt_in = torch.full((B, L), model.pad_id)
    for b, s in enumerate(seqs):
        tgt[b, : len(s) + 1] = torch.tensor(s + [model.eos_id])
        tgt_in[b, : len(s) + 1] = torch.tensor([model.bos_id] + s)
    log_p = model.decode(tgt_in, model.encode(src).memory).log_softmax(-1).gather(-1, tgt[..., None])[..., 0]
    return tgt, tgt_in, -log_p[tgt != model.pad_id].mean()


@pytest.mark.parametrize("wrong", [hard_coded, lambda m, s, q: padded_batch(m, s, q, loss="sum_over_12")])
def test_10_1_rejects_the_notebook_batch_s_sizes_typed_in(tiny_and_batch, wrong):
    """B, L = 3, 6 and a sum divided by 12 (the notebook batch's real tokens) pass on the notebook's batch and on
    its rows moved; the bigger batch shows them."""
    model, src, seqs = tiny_and_batch
    verdict = check("10.1", wrong, quiet=True, seqs=seqs, model=model, src=src)
    assert verdict.ok is False and verdict.message.startswith("on a bigger batch"), verdict.message


@pytest.mark.parametrize("loss", ["probs", "int"])
def test_10_1_catch_all_gives_no_recipe(tiny_and_batch, loss):
    model, src, seqs = tiny_and_batch
    verdict = check("10.1", lambda m, s, q: padded_batch(m, s, q, loss=loss), quiet=True, seqs=seqs, model=model,
                    src=src)
    assert verdict.ok is False and "not the loss training minimises" in verdict.message, verdict.message
    for word in ("pad", "average", "mean", "tgt_in", "log"):
        assert word not in verdict.message, verdict.message


def test_10_1_says_what_the_answer_must_be(tiny_and_batch):
    model, src, seqs = tiny_and_batch
    assert "expected a function" in check("10.1", [1, 2], quiet=True, seqs=seqs, model=model, src=src).message
    two = lambda m, s, q: padded_batch(m, s, q)[:2]
    assert "three values" in check("10.1", two, quiet=True, seqs=seqs, model=model, src=src).message


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
