"""attnlib.gpt: the KV cache equals recomputation, generation with and without it agrees token for token,
the parameter count matches a formula, no position sees the future, and bad inputs are refused by name."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlib.gpt import GPT, GPTConfig
from attnlib.multihead import KVCache
from attnlib.sampling import sample_next
from attnlib.paths import model_path


def small(vocab=11, max_len=24, d=16, heads=2, layers=2, seed=0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab, max_len, d, heads, layers, **kw)).eval()


def test_config_defaults_d_ff_to_four_times_d_model():
    assert GPTConfig(10, 8, 12, 3, 1).d_ff == 48
    assert GPTConfig(10, 8, 12, 3, 1, d_ff=20).d_ff == 20


@pytest.mark.parametrize("kwargs, says", [
    (dict(d_model=10, num_heads=3), "d_model=10 and num_heads=3"),
    (dict(max_len=0), "max_len must be a positive int, got 0"),
    (dict(dropout=1.5), "dropout must be in [0, 1), got 1.5"),
])
def test_config_refuses_bad_sizes(kwargs, says):
    base = dict(vocab_size=10, max_len=8, d_model=12, num_heads=3, num_layers=1)
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        GPTConfig(**{**base, **kwargs})


def parameter_formula(V: int, T: int, d: int, layers: int, d_ff: int) -> int:
    attention = 4 * (d * d + d)                 # w_q, w_k, w_v, w_o with biases
    feed_forward = d * d_ff + d_ff + d_ff * d + d
    norms = 2 * 2 * d                           # two LayerNorms per block
    # token embedding (shared with the output layer), positions, blocks, final LayerNorm
    return V * d + T * d + layers * (attention + feed_forward + norms) + 2 * d


@pytest.mark.parametrize("V, T, d, h, layers, d_ff", [(11, 24, 16, 2, 2, None), (103, 64, 48, 4, 2, 192), (7, 5, 8, 8, 3, 3)])
def test_parameter_count_matches_the_formula(V, T, d, h, layers, d_ff):
    model = GPT(GPTConfig(V, T, d, h, layers, d_ff))
    counted = sum(p.numel() for p in model.parameters())  # the tied matrix counts once
    assert counted == parameter_formula(V, T, d, layers, d_ff or 4 * d)
    assert model.head.weight is model.tok_emb.weight


def test_forward_shapes_and_attention_maps():
    model = small()
    ids = torch.randint(0, 11, (3, 9))
    logits, maps = model(ids, return_attention=True)
    assert logits.shape == (3, 9, 11)
    assert len(maps) == 2 and all(w.shape == (3, 2, 9, 9) for w in maps)
    for w in maps:
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 2, 9))
        assert (w.triu(1) == 0).all()  # nothing above the diagonal: the future gets weight 0
    torch.testing.assert_close(model(ids), logits, atol=1e-6, rtol=0)  # fused kernel equals the visible one


def test_equals_a_plain_pytorch_reimplementation():
    """The same weights run through F.scaled_dot_product_attention(is_causal=True) and F.layer_norm by hand."""
    model = small(d=16, heads=4)
    ids = torch.randint(0, 11, (2, 10))
    x = model.tok_emb(ids) + model.pos_emb.weight[:10]
    for blk in model.blocks:
        a = blk.attn
        h = F.layer_norm(x, (16,), blk.norm1.weight, blk.norm1.bias)
        q, k, v = (lin(h).view(2, 10, 4, 4).transpose(1, 2) for lin in (a.w_q, a.w_k, a.w_v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 10, 16)
        x = x + a.w_o(o)
        h = F.layer_norm(x, (16,), blk.norm2.weight, blk.norm2.bias)
        x = x + blk.ff.linear2(F.gelu(blk.ff.linear1(h)))
    ref = F.layer_norm(x, (16,), model.norm.weight, model.norm.bias) @ model.tok_emb.weight.T
    torch.testing.assert_close(model(ids), ref, atol=1e-5, rtol=0)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), T=st.integers(2, 24), B=st.integers(1, 3),
       cuts=st.lists(st.integers(1, 23), max_size=4))
def test_cached_logits_equal_a_full_forward_pass(seed, T, B, cuts):
    """Feed the sequence in arbitrary chunks through a cache: each chunk's logits are the matching rows."""
    model = small(seed=seed)
    ids = torch.randint(0, 11, (B, T), generator=torch.Generator().manual_seed(seed))
    full = model(ids)
    bounds = sorted({0, T, *(c for c in cuts if c < T)})
    cache = model.new_cache()
    with torch.no_grad():
        parts = []
        for a, b in zip(bounds, bounds[1:]):
            parts.append(model(ids[:, a:b], cache))
            assert all(len(c) == b for c in cache)  # every layer's cache grew in place by the chunk
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


def test_cache_holds_keys_and_values_of_the_formula_size():
    model = small(d=16, heads=2, layers=3)
    cache = model.new_cache()
    model(torch.randint(0, 11, (1, 13)), cache)
    assert len(cache) == 3 and all(c.k.shape == c.v.shape == (1, 2, 13, 8) for c in cache)  # one per layer
    assert sum(c.nbytes() for c in cache) == 2 * 3 * 13 * 16 * 4  # 2 · layers · context · d_model · bytes per float32


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), prompt=st.integers(1, 8), new=st.integers(0, 14),
       temperature=st.sampled_from([0.0, 0.7, 1.0, 1.5]), top_k=st.sampled_from([None, 1, 3, 11]))
def test_cached_generation_gives_exactly_the_tokens_of_uncached_generation(seed, prompt, new, temperature, top_k):
    model = small(seed=seed)
    ids = torch.randint(0, 11, (2, prompt), generator=torch.Generator().manual_seed(seed))
    runs = [model.generate(ids, new, temperature, top_k, use_cache=c, generator=torch.Generator().manual_seed(seed))
            for c in (True, False)]
    assert runs[0].shape == (2, prompt + new)
    assert torch.equal(runs[0][:, :prompt], ids)
    assert torch.equal(runs[0], runs[1])


def test_greedy_generation_follows_the_argmax_of_the_full_forward_pass():
    model = small(seed=3)
    out = model.generate(torch.tensor([[1, 2, 3]]), 10, temperature=0)
    logits = model(out[:, :-1])
    assert torch.equal(logits[0, 2:].argmax(-1), out[0, 3:])


def test_sampling_respects_top_k_and_differs_from_greedy():
    logits = torch.tensor([[0.0, 3.0, 2.9, 2.8, -1.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    draws = sample_next(logits, 1.0, top_k=2, generator=g).flatten()
    assert set(draws.tolist()) == {1, 2}  # only the two largest logits, and both of them
    assert set(sample_next(logits, 0.0).flatten().tolist()) == {1}


def test_generate_restores_training_mode_and_ignores_dropout():
    model = small(dropout=0.5).train()
    ids = torch.tensor([[1, 2]])
    a = model.generate(ids, 8, temperature=0)
    assert model.training
    assert torch.equal(a, model.generate(ids, 8, temperature=0, use_cache=False))


def test_causal_the_gradient_from_a_future_token_is_exactly_zero():
    model = small(seed=5)
    seen = {}

    def keep(module, inputs, output):  # the token embeddings (1, 12, d) of the real forward pass
        output.retain_grad()
        seen["emb"] = output

    model.tok_emb.register_forward_hook(keep)
    model(torch.randint(0, 11, (1, 12)), return_attention=True)[0][0, 6].sum().backward()
    grad = seen["emb"].grad[0]  # (12, d)
    assert (grad[7:] == 0).all()  # tokens 7..11 come after position 6: exactly zero
    assert (grad[:7].abs().sum(-1) > 0).all()  # and every earlier token does matter


def test_changing_a_future_token_leaves_earlier_logits_unchanged():
    model = small(seed=6)
    ids = torch.randint(0, 11, (1, 10))
    other = ids.clone()
    other[0, 7] = (ids[0, 7] + 1) % 11
    a, b = model(ids), model(other)
    assert torch.equal(a[0, :7], b[0, :7]) and not torch.allclose(a[0, 7:], b[0, 7:])


@pytest.mark.parametrize("call, says", [
    (lambda m: m(torch.zeros(3, dtype=torch.long)), "ids must be 2-D, but it has shape (3,)"),
    (lambda m: m(torch.zeros(1, 3)), "got dtype torch.float32"),
    (lambda m: m(torch.tensor([[0, 11]])), "ids must lie in [0, 10] (vocab_size=11), got values from 0 to 11"),
    (lambda m: m(torch.zeros(1, 25, dtype=torch.long)), "25 positions in all, but max_len is 24"),
    (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), "ids has shape (1, 0)"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), cache={}), "cache must be model.new_cache(): a list of 2 KVCache, got dict"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), head_mask=torch.ones(2)), "head_mask must be 2-D, but it has shape (2,)"),
    (lambda m: m(torch.zeros(1, 3, dtype=torch.long), head_mask=torch.ones(3, 2)), "head_mask has shape (3, 2) but it must be (layers, heads) = (2, 2)"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=-1), "temperature must be >= 0"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), 3, top_k=12), "top_k must be in [1, 11] (vocab_size), got 12"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), -1), "max_new_tokens must be an int >= 0, got -1"),
])
def test_bad_inputs_name_expected_and_actual(call, says):
    with pytest.raises(ValueError, match=__import__("re").escape(says)):
        call(small())


def test_a_cache_that_would_run_past_max_len_names_both_numbers():
    model = small()
    cache = model.new_cache()
    model(torch.zeros(1, 20, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="the cache holds 20 tokens: 25 positions in all, but max_len is 24"):
        model(torch.zeros(1, 5, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="ids has batch size 2 but the cache was filled with batch size 1"):
        model(torch.zeros(2, 1, dtype=torch.long), cache)
    assert all(len(c) == 20 for c in cache)  # a refused call leaves the cache as it was


def test_save_and_load_round_trip(tmp_path):
    model = small(seed=9)
    model.save(tmp_path / "g.pt", chars="abc", val_loss=1.5)
    loaded, extra = GPT.load(tmp_path / "g.pt")
    ids = torch.randint(0, 11, (2, 7))
    assert torch.equal(loaded(ids), model(ids)) and not loaded.training
    assert extra == {"chars": "abc", "val_loss": 1.5}
    assert loaded.head.weight is loaded.tok_emb.weight  # still tied after loading


def test_the_saved_small_gpt_still_reaches_its_stored_validation_loss():
    """data/gpt_small.pt (notebook 11): re-measure its loss on the corpus' validation text."""
    from pathlib import Path
    model, extra = GPT.load(model_path("gpt_small.pt"))
    text = (Path(__file__).resolve().parents[1] / "data" / "corpus" / "python_docs_topics.txt").read_text("utf-8")
    chars = extra["chars"]
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text[extra["val_start"]:]])
    T = model.config.max_len
    n = (len(ids) - 1) // T
    with torch.no_grad():
        loss = F.cross_entropy(model(ids[: n * T].view(n, T)).flatten(0, 1), ids[1: n * T + 1]).item()
    assert math.isclose(loss, extra["val_loss"], abs_tol=1e-4)
    assert loss < extra["bigram_loss"] - 0.2
    assert all(isinstance(c, KVCache) for c in model.new_cache())


@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_runs_past_max_len_by_cropping_the_context(use_cache):
    """As nanoGPT does: the model reads the last max_len tokens; the prompt may be longer than max_len too."""
    model = small(seed=4)
    prompt = torch.randint(0, 11, (2, 30))  # longer than max_len = 24
    out = model.generate(prompt, 40, temperature=0, use_cache=use_cache)
    assert out.shape == (2, 70) and torch.equal(out[:, :30], prompt)
    for t in (30, 45, 69):  # each token is the argmax after the 24 tokens before it
        assert torch.equal(model(out[:, t - 24:t])[:, -1].argmax(-1), out[:, t])


def test_head_mask_zero_removes_a_head_and_ones_change_nothing():
    model = small(seed=8, d=16, heads=4)
    ids = torch.randint(0, 11, (2, 9))
    ones = torch.ones(2, 4)
    assert torch.equal(model(ids, head_mask=ones), model(ids))
    ablated = ones.clone()
    ablated[1, 2] = 0
    seen = {}
    model.blocks[1].attn.w_o.register_forward_pre_hook(lambda m, args: seen.setdefault("heads", args[0].clone()))
    model(ids, head_mask=ablated)
    assert (seen["heads"][..., 8:12] == 0).all() and (seen["heads"][..., :8] != 0).any()  # head 2 of layer 1 is gone


def test_generation_stops_when_every_sequence_has_produced_the_stop_token():
    model = small(seed=2)
    prompt = torch.randint(0, 11, (3, 4), generator=torch.Generator().manual_seed(0))
    free = model.generate(prompt, 20, temperature=0)
    stop = int(free[0, 6])  # a token the greedy run of row 0 produces
    out = model.generate(prompt, 20, temperature=0, stop_id=stop)
    for row, full in zip(out, free):
        new, ref = row[4:], full[4:4 + len(row) - 4]
        hit = (ref == stop).nonzero()
        if len(hit):  # up to the first stop the tokens are the free run's; after it only stop_id
            k = int(hit[0])
            assert torch.equal(new[:k + 1], ref[:k + 1]) and (new[k:] == stop).all()
        else:
            assert torch.equal(new, ref)
    assert (out[:, -1] == stop).all() or out.shape[1] == 24  # it ended early only when every row had stopped
    with pytest.raises(ValueError, match=r"stop_id must be a token id in \[0, 10\], got 11"):
        model.generate(prompt, 3, stop_id=11)
