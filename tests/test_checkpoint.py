"""Tests of attnlib/checkpoint.py: one file format for every model, readable with weights_only=True."""
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from attnlib.checkpoint import Checkpointed, load_checkpoint, save_checkpoint


@dataclass
class TinyConfig:
    d: int = 3


class Tiny(Checkpointed, nn.Module):
    config_class = TinyConfig

    def __init__(self, config: TinyConfig):
        super().__init__()
        self.config = config
        self.lin = nn.Linear(config.d, config.d)


def test_round_trip_keeps_config_weights_and_extra(tmp_path):
    torch.manual_seed(0)
    model = Tiny(TinyConfig(d=5)).train()
    model.save(tmp_path / "m.pt", vocab=["a", "b"], accuracy=0.97)
    loaded, extra = Tiny.load(tmp_path / "m.pt")
    assert loaded.config == TinyConfig(d=5) and not loaded.training
    assert torch.equal(loaded.lin.weight, model.lin.weight)
    assert extra == {"vocab": ["a", "b"], "accuracy": 0.97}
    blob = torch.load(tmp_path / "m.pt", weights_only=True)  # plain types only: no pickled code runs
    assert set(blob) == {"config", "state_dict", "extra"}


def test_a_dict_config_works_and_a_foreign_file_is_named(tmp_path):
    save_checkpoint(nn.Linear(2, 2), tmp_path / "d.pt", {"kind": "linear", "d": 2})
    config, state, extra = load_checkpoint(tmp_path / "d.pt")
    assert config == {"kind": "linear", "d": 2} and set(state) == {"weight", "bias"} and extra == {}
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"is not an attnlib checkpoint: it lacks \['config', 'state_dict'\]"):
        load_checkpoint(tmp_path / "other.pt")
