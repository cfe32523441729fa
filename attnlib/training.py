"""Training helpers: reproducibility and device choice (more to come in this module)."""
from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int = 0) -> int:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) so that a run repeats exactly on the same machine."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    return seed


def get_device() -> torch.device:
    """CUDA when a GPU is present, else the CPU. Nothing in the series requires a GPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
