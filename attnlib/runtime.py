"""What every run needs before any model exists: seeds, the device, a progress bar that saves well, eval mode.

The ground floor of attnlib: it imports nothing else from the package.
"""
from __future__ import annotations

import contextlib
import functools
import os
import random
from typing import Iterator

import numpy as np
import torch
from torch import nn


def seed_everything(seed: int = 0) -> int:
    """Seed Python's ``random``, NumPy and PyTorch (CPU and every CUDA device); return ``seed``.

    After it, the random draws of these three libraries repeat from run to run. A whole run
    repeats exactly only on the same machine and versions, with deterministic operations
    (CPU kernels are; some CUDA kernels are not unless
    ``torch.use_deterministic_algorithms(True)``), and only if nothing depends on the order
    of a ``set`` of strings: Python randomises ``str`` hashes per interpreter, and
    ``PYTHONHASHSEED`` only takes effect when an interpreter starts. So setting it here
    (as this function does) fixes the hashes of child processes started afterwards, never
    those of the running interpreter; for that, start Python (or Jupyter) with it set.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    return seed


def get_device() -> torch.device:
    """CUDA when a GPU is present, else the CPU. Nothing in the series requires a GPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def progress_bar(iterable=None, **kwargs):
    """A ``tqdm.auto`` progress bar whose *saved* notebook output shows how far it got.

    In a notebook, tqdm draws a widget, and a notebook saved after execution keeps only the
    text the widget showed when it appeared (``0%|          | 0/12``), although the loop ran
    to the end. This bar is displayed with a display id and, when it closes, rewrites that
    output with its final state (``100%|##########| 12/12 [00:05<00:00, ...]``); a bar with
    ``leave=False`` rewrites it as empty, so it vanishes from the saved file as it does from
    the screen. Outside a notebook it is plain tqdm. Takes tqdm's arguments (``desc``,
    ``total``, ``leave``, ``disable``, ...).
    """
    from tqdm.auto import tqdm
    from tqdm.autonotebook import tqdm as chosen
    from tqdm.std import tqdm as console

    if chosen is console:  # a terminal or a script: nothing is saved
        return tqdm(iterable, **kwargs)
    return _notebook_bar_class(tqdm)(iterable, **kwargs)


@functools.cache
def _notebook_bar_class(base: type) -> type:
    from IPython.display import display

    class NotebookBar(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, display=False, **kwargs)  # shown below, with a display id
            self._handle = None if self.disable else display(self.container, display_id=True)

        def close(self):
            super().close()
            handle, self._handle = getattr(self, "_handle", None), None
            if handle is not None and self.leave:
                handle.update(self.container)  # the saved output: the final bar
            elif handle is not None:
                handle.update({"text/plain": ""}, raw=True)  # leave=False: nothing

    return NotebookBar


@contextlib.contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Put ``modules`` in eval mode (no dropout) for a ``with`` block, then give each one back its own mode."""
    modes = [m.training for m in modules]
    for m in modules:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(modules, modes):
            m.train(mode)
