"""Tests of attnlib/runtime.py's eval_mode (seed_everything and progress_bar are tested in test_training.py)."""
import pytest
from torch import nn

from attnlib import eval_mode


def test_eval_mode_switches_off_dropout_and_restores_each_module():
    a, b = nn.Dropout(0.5).train(), nn.Dropout(0.5).eval()
    with eval_mode(a, b):
        assert not a.training and not b.training
    assert a.training and not b.training


def test_eval_mode_restores_after_an_error():
    a = nn.Linear(2, 2).train()
    with pytest.raises(RuntimeError), eval_mode(a):
        raise RuntimeError("boom")
    assert a.training
