"""Notebook 13's checkers: the right answers pass (in every form a learner's evidence allows), the mistakes
learners make are rejected with a sentence that names them, and no message gives the answer's number away."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlib.exercises import check
from attnlib.gguf_io import unpermute_rope_rows
from attnlib.layers import RMSNorm
from attnlib.multihead import KVCache, MultiHeadAttention
from attnlib.smollm2 import SmolLM2Config


# 13.1 RMSNorm ------------------------------------------------------------------------------------------------

def rms_right(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_rsqrt(x, weight, eps):  # another right form
    return weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))


def rms_float64_inside(x, weight, eps):  # computed in float64, cast back: right
    x64 = x.double()
    return (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


@pytest.mark.parametrize("answer", [rms_right, rms_rsqrt, rms_float64_inside])
def test_13_1_accepts_rmsnorm(answer):
    assert check("13.1", answer, quiet=True)


def rms_module(x, weight, eps):  # PyTorch's own module: the exercise rules it out
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def rms_attnlib(x, weight, eps):  # attnlib's module: ruled out as well
    norm = RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def rms_helper(x, weight, eps):  # the forbidden call one function deeper is found too
    def inner(t):
        return F.rms_norm(t, t.shape[-1:], weight, eps)
    return inner(x)


@pytest.mark.parametrize("answer, name", [
    (rms_module, "nn.RMSNorm"),
    (lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps), "F.rms_norm"),
    (lambda x, w, eps: torch.rms_norm(x, x.shape[-1:], w, eps), "torch.rms_norm"),
    (rms_attnlib, "attnlib's RMSNorm"),
    (rms_helper, "F.rms_norm"),
])
def test_13_1_rejects_the_forbidden_functions_by_name(answer, name):
    verdict = check("13.1", answer, quiet=True)
    assert verdict.ok is False and f"calls {name}," in verdict.message and "rules out" in verdict.message


def test_13_1_and_13_2_name_a_float64_result_in_a_sentence():
    """A float64 answer used to reach torch.allclose and come back as 'raised RuntimeError: Float did not match Double'."""
    verdict = check("13.1", lambda x, w, eps: rms_right(x.double(), w.double(), eps), quiet=True)
    assert verdict.ok is False and "torch.float64 tensor for torch.float32 inputs" in verdict.message
    assert "raised" not in verdict.message
    verdict = check("13.2", lambda x, g, u, d: swiglu_right(x.double(), g.double(), u.double(), d.double()), quiet=True)
    assert verdict.ok is False and "torch.float64" in verdict.message and "raised" not in verdict.message


def test_13_1_leaves_no_profiler_behind():
    import sys
    check("13.1", rms_module, quiet=True)
    check("13.1", rms_right, quiet=True)
    assert sys.getprofile() is None


@pytest.mark.parametrize("wrong, says", [
    (lambda x, w, eps: F.layer_norm(x, x.shape[-1:], w, None, eps), "LayerNorm"),
    (lambda x, w, eps: rms_right(x - x.mean(-1, keepdim=True), w, eps), "the mean subtracted"),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps), "multiply by the weight"),
    (lambda x, w, eps: x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * w, "inside the square root"),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True)) * w, "inside the square root"),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, "mean of x²"),
    (lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps) * w, "last dimension"),
    (lambda x, w, eps: x.mean(), "shape"),
    (lambda x, w, eps: None, "returned NoneType"),
    ("rms", "expected a function"),
])
def test_13_1_rejects_typical_mistakes(wrong, says):
    verdict = check("13.1", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


# 13.2 SwiGLU -------------------------------------------------------------------------------------------------

def swiglu_right(x, gate_w, up_w, down_w):
    return (F.silu(x @ gate_w.T) * (x @ up_w.T)) @ down_w.T


def swiglu_linear(x, gate_w, up_w, down_w):  # the same with F.linear and the SiLU written out
    g = F.linear(x, gate_w)
    return F.linear(g * torch.sigmoid(g) * F.linear(x, up_w), down_w)


@pytest.mark.parametrize("answer", [swiglu_right, swiglu_linear])
def test_13_2_accepts_swiglu(answer):
    assert check("13.2", answer, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda x, g, u, d: ((x @ g.T) * F.silu(x @ u.T)) @ d.T, "wrong one of the two projections"),
    (lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "sigmoid"),
    (lambda x, g, u, d: (F.relu(x @ g.T) * (x @ u.T)) @ d.T, "ReLU"),
    (lambda x, g, u, d: (F.gelu(x @ g.T) * (x @ u.T)) @ d.T, "GELU"),
    (lambda x, g, u, d: F.silu(x @ g.T) @ d.T, "up projection is missing"),
    (lambda x, g, u, d: F.silu(x @ u.T) @ d.T, "only one projection"),
    (lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d, "shape"),
    (lambda x, g, u, d: (F.silu(x @ g.T) + (x @ u.T)) @ d.T, "are added"),
    (lambda x, g, u, d: (F.silu(x @ g.T) - (x @ u.T)) @ d.T, "not SwiGLU's output"),
])
def test_13_2_rejects_typical_mistakes(wrong, says):
    verdict = check("13.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


@pytest.mark.parametrize("wrong", [
    lambda x, g, u, d: ((x @ g.T) * F.silu(x @ u.T)) @ d.T, lambda x, g, u, d: F.silu(x @ u.T) @ d.T,
    lambda x, g, u, d: F.silu(x @ g.T) @ d.T, lambda x, g, u, d: (F.silu(x @ g.T) + (x @ u.T)) @ d.T,
    lambda x, g, u, d: (F.silu(x @ g.T) - (x @ u.T)) @ d.T,
])
def test_13_2_messages_never_write_out_the_formula(wrong):
    """A wrong answer is told what is wrong, not given the one-line solution."""
    message = check("13.2", wrong, quiet=True).message
    for answer_part in ("down(", "SiLU(gate", "* up(", "@ W.T", ".T"):
        assert answer_part not in message


# 13.3 undoing the permutation --------------------------------------------------------------------------------

def unpermute_right(w, num_heads):
    head_dim = w.shape[0] // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, -1).transpose(1, 2).reshape(w.shape)


def unpermute_index(w, num_heads):  # the same with an index: even rows of each head, then odd rows
    head_dim = w.shape[0] // num_heads
    order = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return torch.cat([w[h * head_dim:(h + 1) * head_dim][order] for h in range(num_heads)])


@pytest.mark.parametrize("answer", [unpermute_right, unpermute_index])
def test_13_3_accepts_the_inverse(answer):
    assert check("13.3", answer, quiet=True)


@pytest.mark.parametrize("answer", [unpermute_rope_rows, lambda w, n: unpermute_rope_rows(w, n).clone()])
def test_13_3_rejects_attnlibs_own_function(answer):
    """The exercise rules out unpermute_rope_rows: called directly or inside the answer, it is named."""
    verdict = check("13.3", answer, quiet=True)
    assert verdict.ok is False and "calls attnlib's unpermute_rope_rows" in verdict.message


def permute_again(w, num_heads):
    head_dim = w.shape[0] // num_heads
    return w.reshape(num_heads, 2, head_dim // 2, -1).transpose(1, 2).reshape(w.shape)


@pytest.mark.parametrize("wrong, says", [
    (lambda w, n: w, "unchanged"),
    (permute_again, "a second time"),
    (lambda w, n: unpermute_right(w, 1), "one head"),
    (lambda w, n: w.flip(0), "not back in Hugging Face's order"),
    (lambda w, n: w[:-1], "shape"),
    (None, "not attempted"),
])
def test_13_3_rejects_typical_mistakes(wrong, says):
    verdict = check("13.3", wrong, quiet=True)
    assert not verdict and says in verdict.message


# 13.4 the cache's size, with a batch, a window and sinks -----------------------------------------------------

def cache_right(config, tokens, kv_heads, bytes_per_number=4, window=None, sinks=0, batch=1):
    held = tokens if window is None else min(tokens, window + sinks)
    return 2 * config.num_layers * batch * held * kv_heads * (config.d_model // config.num_heads) * bytes_per_number


def cache_keeping(held_of):
    """An answer right in everything but how many tokens a sequence keeps: held_of(tokens, window, sinks)."""
    def answer(c, t, kv, b=4, window=None, sinks=0, batch=1):
        held = t if window is None else held_of(t, window, sinks)
        return 2 * c.num_layers * batch * held * kv * (c.d_model // c.num_heads) * b
    return answer


def test_13_4_accepts_the_formula():
    assert check("13.4", cache_right, quiet=True)
    assert check("13.4", lambda *a, **k: float(cache_right(*a, **k)), quiet=True)   # a float of bytes
    assert check("13.4", lambda *a, **k: np.int64(cache_right(*a, **k)), quiet=True)   # a numpy integer
    assert check("13.4", lambda *a, **k: np.float64(cache_right(*a, **k)), quiet=True)
    assert check("13.4", lambda *a, **k: torch.tensor(cache_right(*a, **k)), quiet=True)   # a 0-d tensor


def test_13_4_accepts_a_product_built_with_numpy():
    """np.prod returns np.int64, which is not a Python int: it used to be refused as 'not a number of bytes'."""
    def with_np_prod(config, tokens, kv_heads, bytes_per_number=4, window=None, sinks=0, batch=1):
        held = tokens if window is None else min(tokens, window + sinks)
        return np.prod([2, config.num_layers, batch, held, kv_heads, config.d_model // config.num_heads,
                        bytes_per_number])
    assert check("13.4", with_np_prod, quiet=True)

    def keyword_order(config, tokens, kv_heads, bytes_per_number=4, batch=1, sinks=0, window=None):
        return cache_right(config, tokens, kv_heads, bytes_per_number, window, sinks, batch)
    assert check("13.4", keyword_order, quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) // 2, "keys AND values"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, c.num_heads, b, **k), "d_model = num_heads x head_dim"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) * 8, "bits"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, 4, **k), "bytes_per_number"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) / 2**20, "not MiB"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) * c.num_heads, "head_dim"),
    (lambda c, t, kv, b=4, **k: 2 * 30 * t * kv * 64 * b, "nothing fixed"),   # SmolLM2's sizes hard-coded
    (lambda c, t, kv, b=4, **k: "377 MB", "return one number"),
    (lambda c, t, kv, b=4, **k: torch.tensor([cache_right(c, t, kv, b, **k)]), "return one number"),
    (lambda c, t, kv, b=4, **k: np.int64(cache_right(c, t, kv, b, **k) // 2), "keys AND values"),
    (lambda c, t, kv, b=4, window=None, sinks=0, batch=1: cache_right(c, t, kv, b, window, sinks), "per sequence"),
    (lambda c, t, kv, b=4, window=None, sinks=0, batch=1: cache_right(c, t, kv, b, batch=batch), "only its last"),
    (cache_keeping(lambda t, w, s: w + s), "kept whole"),
    (cache_keeping(lambda t, w, s: min(t, w) + s), "count each token once"),
    (cache_keeping(lambda t, w, s: min(t, w)), "sinks (the first tokens) are kept"),
    (cache_keeping(lambda t, w, s: w), "sinks (the first tokens) are kept"),
    (cache_keeping(lambda t, w, s: min(t, w + s) + 1), "not the bytes of the tokens held"),
])
def test_13_4_rejects_typical_mistakes(wrong, says):
    verdict = check("13.4", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_13_4_messages_never_print_the_answer():
    config = SmolLM2Config()
    answers = [cache_right(config, 8192, 3), cache_right(config, 8192, 9),
               cache_right(config, 8192, 3, 2, window=1020, sinks=4, batch=8)]
    for wrong in (lambda c, t, kv, b=4, **k: 0, lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) // 2,
                  cache_keeping(lambda t, w, s: min(t, w))):
        message = check("13.4", wrong, quiet=True).message
        for right in answers:
            assert str(right) not in message and f"{right:,}" not in message and f"{right / 1e6:,.0f} MB" not in message



def filled_cache(config, tokens, batch=1, dtype=torch.float32):
    """A model's cache as section 4 builds it: one KVCache per layer, holding ``tokens`` tokens."""
    cache = [KVCache(config.max_len) for _ in range(config.num_layers)]
    for layer in cache:
        k = torch.randn(batch, config.num_kv_heads, tokens, config.head_dim).to(dtype)
        layer.append(k, k.clone())
    return cache


@pytest.mark.parametrize("batch, dtype", [(1, torch.float32), (2, torch.bfloat16)])
def test_13_4_with_a_measured_cache_accepts_the_formula(batch, dtype):
    """The check cell passes section 4's cache: its tokens, kv heads, batch and bytes per number come from the
    tensors, and the right formula gives exactly the bytes they hold."""
    config = SmolLM2Config()
    assert check("13.4", cache_right, config=config, cache=filled_cache(config, 11, batch, dtype), quiet=True)


@pytest.mark.parametrize("wrong, says", [
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) // 2, "keys AND values"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, c.num_heads, b, **k), "d_model = num_heads x head_dim"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) * c.num_heads, "head_dim"),
    (lambda c, t, kv, b=4, **k: cache_right(c, t, kv, b, **k) + 1, "not the bytes of the tokens held"),
])
def test_13_4_with_a_measured_cache_names_it_first(wrong, says):
    """A wrong answer is caught on the cache the learner can inspect, and told so, without the cache's bytes."""
    config = SmolLM2Config()
    cache = filled_cache(config, 11)
    verdict = check("13.4", wrong, config=config, cache=cache, quiet=True)
    assert verdict.ok is False and "the given cache" in verdict.message and says in verdict.message
    held = sum(layer.nbytes() for layer in cache)
    assert str(held) not in verdict.message and f"{held:,}" not in verdict.message


def test_13_4_other_model_has_every_field_of_model_config():
    """The other model used to be a stand-in with five fields: an answer reading config.max_len (to clamp the
    tokens), d_ff or vocab_size got 'raised AttributeError'. Clamping to max_len must stay right on every case."""
    def clamped(config, tokens, kv_heads, bytes_per_number=4, window=None, sinks=0, batch=1):
        tokens = min(tokens, config.max_len)
        assert config.d_ff > 0 and config.vocab_size > 0
        return cache_right(config, tokens, kv_heads, bytes_per_number, window, sinks, batch)
    assert check("13.4", clamped, quiet=True)
    config = SmolLM2Config()
    assert check("13.4", clamped, config=config, cache=filled_cache(config, 11), quiet=True)


def test_13_4_names_both_causes_of_three_times_the_size():
    """head_dim = d_model / kv_heads gives the same 3x as counting the query heads: the message names both."""
    def head_dim_from_kv(c, t, kv, b=4, window=None, sinks=0, batch=1):
        held = t if window is None else min(t, window + sinks)
        return 2 * c.num_layers * batch * held * kv * (c.d_model // kv) * b
    for kwargs in ({}, {"config": SmolLM2Config(), "cache": filled_cache(SmolLM2Config(), 11)}):
        verdict = check("13.4", head_dim_from_kv, quiet=True, **kwargs)
        assert verdict.ok is False and "d_model = num_heads x head_dim" in verdict.message
        assert "head_dim = d_model / num_heads" in verdict.message


def fixed_head_dim(c, t, kv, b=4, window=None, sinks=0, batch=1):   # SmolLM2's head_dim hard-coded
    held = t if window is None else min(t, window + sinks)
    return 2 * c.num_layers * batch * held * kv * 64 * b


def test_13_4_names_a_fixed_head_dim_not_the_missing_x2():
    """head_dim 64 hard-coded is right on SmolLM2 and half on the other model (head_dim 128): it used to be told
    'the cache holds keys AND values (x 2)', which the answer has."""
    for kwargs in ({}, {"config": SmolLM2Config(), "cache": filled_cache(SmolLM2Config(), 11)}):
        verdict = check("13.4", fixed_head_dim, quiet=True, **kwargs)
        assert verdict.ok is False and "not a fixed 64" in verdict.message
        assert "keys AND values" not in verdict.message


def reserved_tokens(c, t, kv, b=4, window=None, sinks=0, batch=1):   # max_len tokens: the room reserved
    held = c.max_len if window is None else min(t, window + sinks)
    return 2 * c.num_layers * batch * held * kv * (c.d_model // c.num_heads) * b


def test_13_4_rejects_the_memory_reserved_without_a_cache():
    """Every no-window case used to have 8,192 tokens (= max_len): an answer counting max_len tokens passed
    check("13.4", f) alone. The cases with fewer tokens catch it, with a message that names it."""
    verdict = check("13.4", reserved_tokens, quiet=True)
    assert verdict.ok is False and "memory reserved for max_len" in verdict.message
    assert "count the tokens held" in verdict.message


def test_13_4_rejects_the_memory_reserved_on_the_given_cache():
    config = SmolLM2Config()
    verdict = check("13.4", reserved_tokens, config=config, cache=filled_cache(config, 11), quiet=True)
    assert verdict.ok is False and "the given cache" in verdict.message
    assert "memory reserved for max_len" in verdict.message


def test_13_4_a_forgotten_x2_is_still_named():
    """The new checks (reserved room, fixed head_dim) come before the halving test: a missing x2 keeps its message."""
    def no_x2(c, t, kv, b=4, window=None, sinks=0, batch=1):
        return cache_right(c, t, kv, b, window, sinks, batch) // 2
    for kwargs in ({}, {"config": SmolLM2Config(), "cache": filled_cache(SmolLM2Config(), 11)}):
        verdict = check("13.4", no_x2, quiet=True, **kwargs)
        assert verdict.ok is False and "keys AND values" in verdict.message


def test_13_4_rejects_the_configs_kv_heads_instead_of_the_argument():
    def configs_kv_heads(c, t, kv, b=4, window=None, sinks=0, batch=1):
        return cache_right(c, t, c.num_kv_heads, b, window, sinks, batch)
    verdict = check("13.4", configs_kv_heads, quiet=True)
    assert verdict.ok is False and "kv_heads argument" in verdict.message

# 13.5 removing a head through its weights --------------------------------------------------------------------

def remove_right(attn, head):
    with torch.no_grad():
        attn.w_o.weight[:, head * attn.d_k:(head + 1) * attn.d_k] = 0


def remove_returning_attn(attn, head):
    remove_right(attn, head)
    return attn


@pytest.mark.parametrize("answer", [remove_right, remove_returning_attn])
def test_13_5_accepts_zeroing_the_heads_columns_of_w_o(answer):
    assert check("13.5", answer, quiet=True)


def zero_value_rows(attn, head):  # the GQA trap: one kv head serves several query heads
    group = attn.num_heads // attn.num_kv_heads
    kv = head // group
    with torch.no_grad():
        attn.w_v.weight[kv * attn.d_k:(kv + 1) * attn.d_k] = 0


def zero_query_rows(attn, head):
    with torch.no_grad():
        attn.w_q.weight[head * attn.d_k:(head + 1) * attn.d_k] = 0


def zero_output_rows(attn, head):
    with torch.no_grad():
        attn.w_o.weight[head * attn.d_k:(head + 1) * attn.d_k] = 0


def zero_next_head(attn, head):
    remove_right(attn, (head + 1) % attn.num_heads)


def returns_a_copy(attn, head):
    other = copy.deepcopy(attn)
    remove_right(other, head)
    return other


@pytest.mark.parametrize("wrong, says", [
    (zero_value_rows, "share one key/value head"),
    (zero_query_rows, "uniform, not absent"),
    (zero_output_rows, "only head"),
    (zero_next_head, "not head"),
    (lambda attn, head: None, "did not change"),
    (returns_a_copy, "in place"),
])
def test_13_5_rejects_typical_mistakes(wrong, says):
    verdict = check("13.5", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message
    assert "w_o" not in verdict.message and "output projection" not in verdict.message   # the answer's place unnamed


def test_13_5_leaves_the_callers_random_state_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check("13.5", remove_right, quiet=True)
    assert torch.equal(torch.rand(3), expected)


def test_13_5_removing_through_w_o_equals_head_mask_on_a_gqa_layer():
    """The checker's premise, on another size: zeroed w_o columns == head_mask (9 heads, 3 kv heads)."""
    torch.manual_seed(1)
    attn = MultiHeadAttention(36, 9, bias=False, num_kv_heads=3).eval()
    x = torch.randn(1, 5, 36)
    cut = copy.deepcopy(attn)
    remove_right(cut, 7)
    keep = torch.ones(9)
    keep[7] = 0
    with torch.no_grad():
        assert torch.allclose(cut(x, x, x, causal=True)[0], attn(x, x, x, causal=True, head_mask=keep)[0], atol=1e-6)
