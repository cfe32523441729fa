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
    (REAL, "read as (Lq, Lk)"),
    (REAL[:, None, :, None], "query axis"),
    (REAL[:, None, None, :].float(), "dtype"),
    (torch.ones(2, 1, 1, 4, dtype=torch.bool), "sequence 1 has 2 real tokens"),
    (REAL[:, None, None, :3], "does not broadcast"),
])
def test_10_2_rejects_typical_mistakes(wrong, says):
    verdict = check("10.2", wrong, quiet=True, src=SRC)
    assert verdict.ok is False and says in verdict.message


def test_10_2_accepts_the_key_padding_mask():
    assert check("10.2", REAL[:, None, None, :], quiet=True, src=SRC)
    assert check("10.2", (SRC != 0).view(2, 1, 1, 4), quiet=True, src=SRC)


NEXT = {1: 5, 5: 3, 3: 7, 7: 2, 2: 2}  # <bos> -> 5 -> 3 -> 7 -> <eos>: greedy decoding gives [5, 3, 7, 2]


class RuleModel(Seq2SeqTransformer):
    """A Seq2SeqTransformer whose decoder follows NEXT exactly, so greedy decoding is known in advance."""

    def decode(self, tgt_in, memory, src_key_padding_mask=None, return_attention=False):
        logits = torch.full((*tgt_in.shape, 8), -5.0)
        for b in range(tgt_in.shape[0]):
            for t, tok in enumerate(tgt_in[b].tolist()):
                logits[b, t, NEXT.get(tok, 4)] = 5.0
        return (logits, [], []) if return_attention else logits


@pytest.fixture(scope="module")
def model_and_src():
    torch.manual_seed(0)
    model = RuleModel(Seq2SeqTransformerConfig(12, 8, d_model=8, num_heads=2, d_ff=16)).eval()
    src = torch.tensor([[5, 9, 3, 7, 11, 2]])
    assert greedy_decode(model, src, max_len=6)[0].tolist()[:4] == [5, 3, 7, 2]
    return model, src, [5, 3, 7, 2]


def test_10_3_rejects_typical_mistakes(model_and_src):
    model, src, right = model_and_src
    with torch.no_grad():
        memory = model.encode(src).memory
        first = model.decode(torch.tensor([[1]]), memory)[0, -1].argmax().item()
    cases = [
        ([1] + right, "start with <bos>"),
        ([first] * len(right), "input never grows"),
        (right + [5, 5], "stop after <eos>"),
        (right[:-2], "stops early"),
        ([right[0], (right[1] + 1) % 8 or 3] + right[2:], "step 1 predicted"),
    ]
    for wrong, says in cases:
        verdict = check("10.3", wrong, quiet=True, model=model, src=src, max_len=6)
        assert verdict.ok is False and says in verdict.message, (wrong, verdict.message)


def test_10_3_accepts_greedy_decoding(model_and_src):
    model, src, right = model_and_src
    assert check("10.3", right, quiet=True, model=model, src=src, max_len=6)
    assert check("10.3", torch.tensor(right), quiet=True, model=model, src=src, max_len=6)
