"""One way to save and load a model: its configuration, its weights and any metadata, in one file.

The file holds only plain types and tensors, so ``torch.load(path, weights_only=True)`` reads it
(no pickled code runs). Every model of attnlib that saves itself goes through these two functions.
"""
from __future__ import annotations

from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn


def save_checkpoint(model: nn.Module, path: str | Path, config: Any, **extra: Any) -> None:
    """Save ``config`` (a dataclass or a dict of plain values), the model's weights (on the CPU) and ``extra``.

    ``extra`` is JSON-able metadata: a vocabulary as a list, a measured accuracy, the task's recipe.
    """
    config = asdict(config) if is_dataclass(config) else dict(config)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"config": config, "state_dict": state, "extra": dict(extra)}, path)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[dict, dict, dict]:
    """Read a file written by :func:`save_checkpoint`: ``(config dict, state_dict, extra)``."""
    blob = torch.load(path, map_location=map_location, weights_only=True)
    missing = {"config", "state_dict"} - set(blob)
    if missing:
        raise ValueError(f"{path} is not an attnlib checkpoint: it lacks {sorted(missing)} (has {sorted(blob)})")
    return blob["config"], blob["state_dict"], dict(blob.get("extra", {}))


class Checkpointed:
    """``save(path, **extra)`` and ``Model.load(path) -> (model in eval mode, extra)`` for a model built from a config.

    A model class that mixes this in sets ``config_class`` (a dataclass) and keeps its configuration in
    ``self.config``; ``cls(config_class(**config))`` must rebuild it.
    """

    config_class: type

    def save(self, path: str | Path, **extra: Any) -> None:
        """Save config, weights and any extra JSON-able metadata (vocabulary, measured accuracy) to one file."""
        save_checkpoint(self, path, self.config, **extra)

    @classmethod
    def load(cls, path: str | Path, map_location: str | torch.device = "cpu"):
        """Load a model saved with :meth:`save`; returns ``(model in eval mode, extra)``."""
        config, state, extra = load_checkpoint(path, map_location)
        model = cls(cls.config_class(**config))
        model.load_state_dict(state)
        return model.eval(), extra
