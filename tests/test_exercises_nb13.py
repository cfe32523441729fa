"""Notebook 13's checkers: the right answers pass (in every form a learner's evidence allows), the mistakes
learners make are rejected with a sentence that names them, and no message gives the answer's number away."""
import copy

import pytest
import torch
import torch.nn.functional as F

from attnlib.exercises import check
from attnlib.gguf_io import unpermute_rope_rows
from attnlib.multihead import MultiHeadAttention
from attnlib.smollm2 import SmolLM2Config


# 13.1 RMSNorm ------------------------------------------------------------------------------------------------

def rms_right(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rms_rsqrt(x, weight, eps):  # another right form
    return weight * (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps))


def rms_module(x, weight, eps):  # PyTorch's own module, used as the answer: right
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


@pytest.mark.parametrize("answer", [rms_right, rms_rsqrt, rms_module])
def test_13_1_accepts_rmsnorm(answer):
    assert check("13.1", answer, quiet=True)


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
    (lambda x, g, u, d: ((x @ g.T) * F.silu(x @ u.T)) @ d.T, "applied to the gate"),
    (lambda x, g, u, d: (torch.sigmoid(x @ g.T) * (x @ u.T)) @ d.T, "sigmoid"),
    (lambda x, g, u, d: (F.relu(x @ g.T) * (x @ u.T)) @ d.T, "ReLU"),
    (lambda x, g, u, d: (F.gelu(x @ g.T) * (x @ u.T)) @ d.T, "GELU"),
    (lambda x, g, u, d: F.silu(x @ g.T) @ d.T, "gate is missing"),
    (lambda x, g, u, d: (F.silu(x @ g.T) * (x @ u.T)) @ d, "shape"),
    (lambda x, g, u, d: (F.silu(x @ g.T) + (x @ u.T)) @ d.T, "not down(SiLU(gate(x)) * up(x))"),
])
def test_13_2_rejects_typical_mistakes(wrong, says):
    verdict = check("13.2", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


# 13.3 undoing the permutation --------------------------------------------------------------------------------

def unpermute_right(w, num_heads):
    head_dim = w.shape[0] // num_heads
    return w.reshape(num_heads, head_dim // 2, 2, -1).transpose(1, 2).reshape(w.shape)


def unpermute_index(w, num_heads):  # the same with an index: even rows of each head, then odd rows
    head_dim = w.shape[0] // num_heads
    order = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    return torch.cat([w[h * head_dim:(h + 1) * head_dim][order] for h in range(num_heads)])


@pytest.mark.parametrize("answer", [unpermute_right, unpermute_index, unpermute_rope_rows])
def test_13_3_accepts_the_inverse(answer):
    assert check("13.3", answer, quiet=True)


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


# 13.4 the cache's size ---------------------------------------------------------------------------------------

def cache_right(config, tokens, kv_heads, bytes_per_number=4):
    return 2 * config.num_layers * tokens * kv_heads * (config.d_model // config.num_heads) * bytes_per_number


def test_13_4_accepts_the_formula():
    assert check("13.4", cache_right, quiet=True)
    assert check("13.4", lambda c, t, kv, b=4: float(cache_right(c, t, kv, b)), quiet=True)   # a float of bytes


@pytest.mark.parametrize("wrong, says", [
    (lambda c, t, kv, b=4: cache_right(c, t, kv, b) // 2, "keys AND values"),
    (lambda c, t, kv, b=4: cache_right(c, t, c.num_heads, b), "query heads"),
    (lambda c, t, kv, b=4: cache_right(c, t, kv, b) * 8, "bits"),
    (lambda c, t, kv, b=4: cache_right(c, t, kv, 4), "bytes_per_number"),
    (lambda c, t, kv, b=4: cache_right(c, t, kv, b) / 2**20, "not MiB"),
    (lambda c, t, kv, b=4: 2 * c.num_layers * t * kv * c.d_model * b, "head_dim"),
    (lambda c, t, kv, b=4: 2 * 30 * t * kv * 64 * b, "nothing fixed"),   # SmolLM2's sizes hard-coded
    (lambda c, t, kv, b=4: "377 MB", "number of bytes"),
])
def test_13_4_rejects_typical_mistakes(wrong, says):
    verdict = check("13.4", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_13_4_messages_never_print_the_answer():
    right = cache_right(SmolLM2Config(), 8192, 3)
    for wrong in (lambda c, t, kv, b=4: 0, lambda c, t, kv, b=4: cache_right(c, t, kv, b) // 2):
        message = check("13.4", wrong, quiet=True).message
        assert str(right) not in message and f"{right:,}" not in message


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
    (zero_output_rows, "output projection"),
    (zero_next_head, "output projection"),
    (lambda attn, head: None, "did not change"),
    (returns_a_copy, "in place"),
])
def test_13_5_rejects_typical_mistakes(wrong, says):
    verdict = check("13.5", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


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
