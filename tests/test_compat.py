"""Tests of attnlib/compat.py: one copy-from-PyTorch strategy (copy, probe, undo), activations compared by value."""
import pytest
import torch
from torch import nn

from attnlib.compat import activation_name, copy_checked, same_activation


def test_same_activation_compares_values_not_names():
    assert same_activation(nn.ReLU(), lambda t: torch.clamp(t, min=0)) == (True, 0.0)
    same, gap = same_activation(nn.GELU(), nn.GELU(approximate="tanh"))
    assert not same and 1e-5 < gap < 1e-2
    assert activation_name(nn.GELU(approximate="tanh")) == "GELU(approximate='tanh')"
    assert activation_name(torch.relu) == "relu"


def test_copy_checked_keeps_a_good_copy_and_restores_modes():
    ours, theirs = nn.Linear(4, 4).train(), nn.Linear(4, 4).eval()
    copy_checked(ours, theirs, lambda: ours.load_state_dict(theirs.state_dict()), ours, theirs, 4, "nn.Linear")
    assert torch.equal(ours.weight, theirs.weight)
    assert ours.training and not theirs.training  # each module gets its own mode back


def test_copy_checked_undoes_a_copy_that_computes_something_else():
    ours, theirs = nn.Linear(4, 4), nn.Linear(4, 4)
    before = ours.weight.clone()

    def copy():  # copies the weights, but a "setting" (here: a doubled output) is not reproduced
        ours.load_state_dict(theirs.state_dict())

    with pytest.raises(ValueError, match=r"after copying, this module and the nn.Linear give different outputs .*"
                                         r"nothing was copied"):
        copy_checked(ours, theirs, copy, lambda x: 2 * ours(x), theirs, 4, "nn.Linear")
    assert torch.equal(ours.weight, before)


def test_copy_checked_leaves_the_global_random_state_alone():
    ours, theirs = nn.Linear(3, 3), nn.Linear(3, 3)
    state = torch.get_rng_state()
    copy_checked(ours, theirs, lambda: ours.load_state_dict(theirs.state_dict()), ours, theirs, 3, "nn.Linear")
    assert torch.equal(torch.get_rng_state(), state)
