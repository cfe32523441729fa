"""Checkers for notebook 13's exercises (RMSNorm, SwiGLU, undoing the GGUF permutation, the bytes a KV cache
holds with a batch, a window and sinks, removing a head through its weights). Each checker builds its own small inputs
and needs no model; 13.4's check cell in the notebook also passes section 4's filled cache and model.config, so it
needs section 4 run first (the checker works without them)."""
from __future__ import annotations

import copy
import dataclasses
import numbers
import sys

import torch
import torch.nn.functional as F
from torch import nn

from ..gguf_io import permute_rope_rows, unpermute_rope_rows
from ..layers import RMSNorm
from ..multihead import MultiHeadAttention
from . import checker, require
from .nb00 import callable_problem

# What an exercise forbids: the functions that would do the work for the learner (Python functions by their code,
# built-ins by identity). A call to any of them while the answer runs, however deep, is reported by name.
_NO_RMSNORM = {"F.rms_norm": F.rms_norm, "torch.rms_norm": torch.rms_norm, "nn.RMSNorm": nn.RMSNorm.forward,
               "attnlib's RMSNorm": RMSNorm.forward}
_NO_UNPERMUTE = {"attnlib's unpermute_rope_rows": unpermute_rope_rows}


def _forbidden_call(forbidden: dict, fn, *args):
    """Call ``fn(*args)``; return (its result, the name of the first function of ``forbidden`` it called, or None)."""
    codes = {f.__code__: name for name, f in forbidden.items() if hasattr(f, "__code__")}
    builtins = {id(f): name for name, f in forbidden.items() if not hasattr(f, "__code__")}
    called = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            called.append(codes[frame.f_code])
        elif event == "c_call" and id(arg) in builtins:
            called.append(builtins[id(arg)])

    before = sys.getprofile()
    sys.setprofile(watch)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(before)
    return out, (called[0] if called else None)


def _tensor_answer(fn, *args, like: torch.Tensor, forbidden: dict | None = None) -> torch.Tensor:
    """The answer's output for ``args``: a tensor of ``like``'s dtype, computed without ``forbidden``'s functions."""
    out, used = _forbidden_call(forbidden or {}, fn, *args)
    require(used and f"your function calls {used}, which the exercise rules out: compute it with tensor operations")
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"it returned {type(out).__name__}, expected a torch.Tensor")
    require(out.dtype != like.dtype and f"it returned a {out.dtype} tensor for {like.dtype} inputs; keep the "
            "inputs' dtype (compute in it, or cast the result back with .to(x.dtype))")
    return out


@checker("13.1")
def rms_norm(answer) -> tuple[bool, str]:
    """A function ``rms_norm(x, weight, eps)``: ``x / sqrt(mean(x²) + eps) * weight`` over the last dimension."""
    require(callable_problem(answer, "a function rms_norm(x, weight, eps)"))
    g = torch.Generator().manual_seed(131)
    x = torch.randn(3, 5, 16, generator=g) * 2 + 1.5                  # a mean far from 0: RMSNorm is not LayerNorm
    x[0, 0] = 1e-3 * torch.randn(16, generator=g)                     # a tiny row: where eps sits shows
    weight = torch.rand(16, generator=g) + 0.5
    eps = 1e-5
    got = _tensor_answer(answer, x.clone(), weight.clone(), eps, like=x, forbidden=_NO_RMSNORM)
    right = F.rms_norm(x, (16,), weight, eps)
    if got.shape != right.shape:
        return False, f"the output has shape {tuple(got.shape)}; it must keep the input's shape {tuple(x.shape)}"
    if torch.allclose(got, right, rtol=1e-4, atol=1e-5):
        return True, "x divided by its root mean square (eps inside the square root), times the weight: nn.RMSNorm's result"
    if torch.allclose(got, F.layer_norm(x, (16,), weight, None, eps), rtol=1e-4, atol=1e-5):
        return False, ("that is LayerNorm (the mean subtracted first): RMSNorm divides x itself by its root mean "
                       "square")
    if torch.allclose(got, F.rms_norm(x, (16,), None, eps), rtol=1e-4, atol=1e-5):
        return False, "the normalisation is right, but multiply by the weight (one scale per feature) at the end"
    if torch.allclose(got[1:], right[1:], rtol=1e-4, atol=1e-5):
        return False, ("right on ordinary rows, wrong on a row of tiny numbers: eps goes inside the square root, "
                       "sqrt(mean(x²) + eps)")
    if torch.allclose(got, x / x.pow(2).sum(-1, keepdim=True).add(eps).sqrt() * weight, rtol=1e-4, atol=1e-5):
        return False, "use the mean of x², not the sum (the root MEAN square)"
    for dim in range(x.dim() - 1):
        wrong = x / x.pow(2).mean(dim, keepdim=True).add(eps).sqrt() * weight
        if torch.allclose(got, wrong, rtol=1e-4, atol=1e-5):
            return False, f"you averaged over dimension {dim}; normalise each token over its features, the last dimension"
    return False, "not nn.RMSNorm's result: compute x / sqrt(mean(x² over the last dimension) + eps) * weight"


@checker("13.2")
def swiglu(answer) -> tuple[bool, str]:
    """A function ``swiglu(x, gate_w, up_w, down_w)`` with nn.Linear-style weights ``(out, in)``, no biases."""
    require(callable_problem(answer, "a function swiglu(x, gate_w, up_w, down_w)"))
    g = torch.Generator().manual_seed(132)
    d, d_ff = 12, 20
    x = torch.randn(2, 7, d, generator=g)
    gate_w, up_w, down_w = (torch.randn(d_ff, d, generator=g) / 3, torch.randn(d_ff, d, generator=g) / 3,
                            torch.randn(d, d_ff, generator=g) / 4)
    got = _tensor_answer(answer, x.clone(), gate_w.clone(), up_w.clone(), down_w.clone(), like=x)
    gate, up = x @ gate_w.T, x @ up_w.T                                 # (2, 7, d_ff) each
    right = (F.silu(gate) * up) @ down_w.T
    if got.shape != right.shape:
        return False, f"the output has shape {tuple(got.shape)}, expected {tuple(right.shape)} (back to d_model)"
    if torch.allclose(got, right, rtol=1e-4, atol=1e-5):
        return True, "down(SiLU(gate(x)) * up(x)): the gate decides, per hidden unit, how much of up(x) passes"
    mistakes = {  # each message says what is wrong, never the formula
        "SiLU went to the wrong one of the two projections": (gate * F.silu(up)) @ down_w.T,
        "that is GLU with a sigmoid gate; SwiGLU uses SiLU(z) = z * sigmoid(z)": (torch.sigmoid(gate) * up) @ down_w.T,
        "that is a ReLU gate (ReGLU); SwiGLU uses SiLU": (F.relu(gate) * up) @ down_w.T,
        "only one projection is used, and it is not the gate's: the two projections must be multiplied element by "
        "element": F.silu(up) @ down_w.T,
        "the up projection is missing: the two projections must be multiplied element by element": F.silu(gate) @ down_w.T,
        "the two projections are added; they must be multiplied element by element": (F.silu(gate) + up) @ down_w.T,
        "the gate is GELU here; SwiGLU uses SiLU": (F.gelu(gate) * up) @ down_w.T,
    }
    for message, wrong in mistakes.items():
        if wrong.shape == got.shape and torch.allclose(got, wrong, rtol=1e-4, atol=1e-5):
            return False, message
    return False, ("not SwiGLU's output: check which projection goes through SiLU, that the two projections are "
                   "multiplied element by element before down, and the weights' layout (out, in), as in nn.Linear")


@checker("13.3")
def unpermute(answer) -> tuple[bool, str]:
    """A function ``unpermute(w, num_heads)`` that undoes llama.cpp's reordering of a query/key weight's rows."""
    require(callable_problem(answer, "a function unpermute(w, num_heads)"))
    g = torch.Generator().manual_seed(133)
    for num_heads, head_dim, d_in in [(3, 8, 5), (2, 64, 7), (9, 16, 4)]:
        original = torch.randn(num_heads * head_dim, d_in, generator=g)   # rows in Hugging Face's order
        stored = permute_rope_rows(original, num_heads)                  # as the GGUF file holds them
        got = _tensor_answer(answer, stored.clone(), num_heads, like=stored, forbidden=_NO_UNPERMUTE)
        if got.shape != original.shape:
            return False, f"unpermute returned shape {tuple(got.shape)} for a weight of shape {tuple(stored.shape)}"
        if torch.equal(got, original):
            continue
        case = f"(num_heads={num_heads}, head_dim={head_dim})"
        if torch.equal(got, stored):
            return False, f"the rows came back unchanged {case}"
        if torch.equal(got, permute_rope_rows(stored, num_heads)):
            return False, (f"you applied the converter's permutation a second time {case}; apply its inverse "
                           "instead (the row a stored row came from, not where it goes)")
        if torch.equal(got, unpermute_rope_rows(stored, 1)):
            return False, f"you treated the whole matrix as one head {case}; reorder the rows within each head"
        return False, f"the rows are not back in Hugging Face's order {case}; each head's rows must be reordered on their own"
    return True, "each head's rows back in the order that rotates halves: even rows first, then odd rows"


def _cache_bytes(c, tokens: int, kv_heads: int, nbytes: int, window=None, sinks: int = 0, batch: int = 1,
                 held=None) -> int:
    """The right bytes of the tokens held (``held``: the tokens each sequence keeps, when a check wants a wrong count
    instead)."""
    if held is None:
        held = tokens if window is None else min(tokens, window + sinks)
    return 2 * c.num_layers * batch * held * kv_heads * c.head_dim * nbytes


def _measured(cache) -> tuple[int, int, int, int, int]:
    """A model's cache (one KVCache, or anything with ``.k`` and ``.v``, per layer) -> (bytes held, batch, kv heads,
    tokens held, bytes per number), read from its tensors."""
    batch, kv, tokens, _ = cache[0].k.shape
    held = sum(layer.k.numel() * layer.k.element_size() + layer.v.numel() * layer.v.element_size() for layer in cache)
    return held, batch, kv, tokens, cache[0].k.element_size()


@checker("13.4")
def kv_cache_bytes(answer, config=None, cache=None) -> tuple[bool, str]:
    """A function ``kv_cache_bytes(config, tokens, kv_heads, bytes_per_number=4, window=None, sinks=0, batch=1)``:
    the KV cache of ``batch`` sequences of ``tokens`` tokens each; with a window, each sequence keeps at most its
    last ``window`` tokens and its first ``sinks`` tokens (StreamingLLM's cache).

    With ``cache`` (a model's filled cache) and its model's ``config``, the first case is that cache: the answer must
    give the bytes its tensors hold."""
    require(callable_problem(answer, "a function kv_cache_bytes(config, tokens, kv_heads, bytes_per_number=4, "
                                     "window=None, sinks=0, batch=1)"))
    from ..smollm2 import SmolLM2Config

    smol = SmolLM2Config()
    # Another model: a real config with every field of model.config. Its max_len (8,192) is at least every case's
    # tokens, so an answer that clamps tokens to config.max_len stays right. Its head_dim is 128, not SmolLM2's 64.
    # The cases of 1,000 and 3,000 tokens (fewer than max_len) tell the tokens held from the room reserved.
    big = dataclasses.replace(smol, vocab_size=128256, num_layers=32, num_heads=32, num_kv_heads=8, d_model=4096,
                              d_ff=14336, max_len=8192)
    cases = [  # config, tokens, kv_heads, bytes per number, window, sinks, batch, the bytes measured (or None)
        (smol, 1000, 3, 4, None, 0, 1, None), (big, 3000, 8, 2, None, 0, 1, None),   # fewer tokens than max_len
        (smol, 8192, 3, 4, None, 0, 1, None), (smol, 8192, 9, 4, None, 0, 1, None), (big, 8192, 8, 2, None, 0, 1, None),
        (smol, 8192, 3, 4, None, 0, 4, None),                                   # a batch, no window
        (smol, 8192, 3, 2, 1020, 4, 8, None), (big, 4096, 8, 2, 2000, 0, 1, None),    # long contexts: the window is full
        (smol, 500, 3, 4, 1020, 4, 2, None), (smol, 1022, 3, 4, 1020, 4, 1, None),    # shorter than window + sinks
    ]
    if cache is not None:                                                 # the cache the learner can inspect, first
        measured, m_batch, m_kv, m_tokens, m_nbytes = _measured(cache)
        cases.insert(0, (config if config is not None else smol, m_tokens, m_kv, m_nbytes, None, 0, m_batch, measured))
    for c, tokens, kv, nbytes, window, sinks, batch, measured in cases:
        right = _cache_bytes(c, tokens, kv, nbytes, window, sinks, batch) if measured is None else measured
        got = answer(c, tokens, kv, nbytes, window=window, sinks=sinks, batch=batch)
        if isinstance(got, torch.Tensor) and got.dim() == 0:
            got = got.item()                                              # a 0-d tensor holds one number
        if isinstance(got, bool) or not isinstance(got, numbers.Real):   # numbers.Real: numpy scalars too
            return False, (f"kv_cache_bytes returned {type(got).__name__}; return one number (an int or a float): "
                           "the bytes")
        got = int(got) if isinstance(got, numbers.Integral) else float(got)
        if got == right:
            continue
        kept = "every token kept" if window is None else f"a window of {window} and {sinks} sinks"
        where = (f"for {c.num_layers} layers, {tokens} tokens, {kv} kv heads, {nbytes} bytes per number, {kept}, "
                 f"a batch of {batch}")
        if measured is not None:
            where = (f"for the given cache ({c.num_layers} layers, {tokens} tokens held, {kv} kv heads, {nbytes} bytes "
                     f"per number, a batch of {batch}), whose bytes are measured from its tensors .k and .v")
        if batch > 1 and got == right / batch:
            return False, f"{where}: the cache holds one set of keys and values per sequence of the batch"
        if window is not None:
            cut = min(tokens, window)
            wrong_held = [  # (tokens kept, what is wrong): the first that matches is reported
                (window + sinks, "a context shorter than window + sinks is kept whole: a sequence cannot hold "
                                 "more tokens than it has"),
                (cut + sinks, "when the context is shorter than window + sinks, its first tokens are already among "
                              "the kept ones: count each token once"),
                (cut, "the sinks (the first tokens) are kept as well as the window"),
                (tokens, "with a window, a sequence keeps only its last window tokens and its first sinks"),
            ]
            for held, message in wrong_held:
                if held != min(tokens, window + sinks) and got == _cache_bytes(c, tokens, kv, nbytes, batch=batch,
                                                                               held=held):
                    return False, f"{where}: {message}"
        if window is None and tokens != c.max_len and got == _cache_bytes(c, tokens, kv, nbytes, batch=batch,
                                                                          held=c.max_len):
            return False, (f"{where}: that is the memory reserved for max_len ({c.max_len:,}) tokens; count the "
                           "tokens held")
        if c.head_dim != 64 and got == right * 64 / c.head_dim:
            return False, (f"{where} (head_dim {c.head_dim}): head_dim is d_model / num_heads of this config, not a "
                           "fixed 64")
        if got == right / 2:
            return False, f"half the right bytes {where}: the cache holds keys AND values (x 2)"
        if got == right * c.num_heads / kv:
            return False, (f"{where}: your count stores d_model = num_heads x head_dim numbers per token per layer "
                           "(for keys, and as many for values); a layer caches kv_heads x head_dim, with head_dim = "
                           "d_model / num_heads")
        if got == right * c.num_kv_heads / kv:
            return False, (f"{where}: you took config.num_kv_heads ({c.num_kv_heads}); count the kv_heads argument "
                           "instead (the same model with another number of key/value heads)")
        if got == right * 8:
            return False, f"{where}: that counts bits; give bytes"
        if nbytes != 4 and got == right * 4 / nbytes:
            return False, f"{where}: use bytes_per_number (here {nbytes}), not always 4"
        if got in (right / 2**20, right / 2**30, right / 1e6, right / 1e9):
            return False, f"{where}: give the answer in bytes, not MiB or GiB"
        if got == right * c.num_heads:
            return False, f"{where}: head_dim is d_model / num_heads (64 in SmolLM2), not d_model"
        return False, (f"{where}: not the bytes of the tokens held. Count what one layer stores for one token (and for which "
                       "heads), how many tokens each sequence keeps, then layers, sequences and bytes; read every "
                       "size from config, nothing fixed")
    return True, ("2 x layers x sequences x tokens kept x kv_heads x head_dim x bytes per number; a window keeps "
                  "at most window + sinks tokens of each sequence")


@checker("13.5")
def remove_head(answer) -> tuple[bool, str]:
    """A function ``remove_head(attn, head)`` that changes ``attn``'s weights in place so that query head
    ``head`` contributes nothing, exactly as ``head_mask`` with a 0 for that head does; every other head intact."""
    require(callable_problem(answer, "a function remove_head(attn, head)"))
    h, g, d = 6, 2, 48                                               # 6 query heads sharing 2 key/value heads
    with torch.random.fork_rng():                                    # the notebook's random state stays untouched
        torch.manual_seed(135)
        base = MultiHeadAttention(d, h, bias=False, num_kv_heads=g).eval()
        x = torch.randn(2, 9, d)
    for head in (0, 4):
        attn = copy.deepcopy(base)
        result = answer(attn, head)
        if result is not None and result is not attn:
            return False, "remove_head should change attn in place (return None or attn itself)"
        with torch.no_grad():
            got = attn(x, x, x, causal=True)[0]
            keep = torch.ones(h)
            keep[head] = 0
            right = base(x, x, x, causal=True, head_mask=keep)[0]
        if torch.allclose(got, right, atol=1e-6):
            continue
        with torch.no_grad():
            unchanged = torch.allclose(got, base(x, x, x, causal=True)[0], atol=1e-6)
            silenced = [i for i in range(h) if torch.allclose(
                got, base(x, x, x, causal=True, head_mask=torch.tensor([0.0 if j // (h // g) == i // (h // g) else 1.0
                                                                         for j in range(h)]))[0], atol=1e-6)]
        if unchanged:
            return False, f"the output did not change: head {head} still contributes"
        if silenced:
            group = [j for j in range(h) if j // (h // g) == head // (h // g)]
            return False, (f"you removed every head of the group {group}: they share one key/value head, so its "
                           f"w_k/w_v rows serve {len(group)} query heads. Remove only head {head}'s own contribution")
        q_rows = slice(head * base.d_k, (head + 1) * base.d_k)
        probe = copy.deepcopy(base)
        with torch.no_grad():
            probe.w_q.weight[q_rows] = 0
            if torch.allclose(got, probe(x, x, x, causal=True)[0], atol=1e-6):
                return False, (f"zeroing head {head}'s query makes its attention uniform, not absent: it still adds "
                               "the average of its values. Remove what the head outputs instead")
        for other in range(h):                                       # the right edit, on another head
            if other != head:
                probe = copy.deepcopy(base)
                with torch.no_grad():
                    probe.w_o.weight[:, other * base.d_k:(other + 1) * base.d_k] = 0
                    if torch.allclose(got, probe(x, x, x, causal=True)[0], atol=1e-6):
                        return False, f"that removed head {other}, not head {head}: check which part belongs to head {head}"
        return False, (f"the output differs from removing head {head} alone (head_mask): part of head {head}'s "
                       f"contribution is left, or another head's changed too. Find the weights that only head {head}'s "
                       "output passes through")
    return True, "zeroing the head's input columns of w_o removes its output, exactly as head_mask does"
