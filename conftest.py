"""Set-up for every pytest run in this repository: unit tests, browser tests and nbval's notebook runs.

Notebooks 02 and 07 save the models they train through ``attnlib.paths.save_path``. Under
test they must never overwrite the committed ``data/*.pt`` (``tests/test_saved_models.py``
checks those files, and a test run must leave ``git status`` empty). So before any test
runs or any kernel starts, ``ATTNLIB_DATA_DIR`` is pointed at a new temporary folder; nbval's
kernels inherit this process's environment. The folder is removed at the end, and the
terminal summary says what the notebooks saved there.

This file sits at the repository root, not in ``tests/``, because pytest loads a conftest
only for the paths it collects: ``pytest notebooks/02_bahdanau_attention.ipynb`` (or
``make notebooks``) never reads ``tests/conftest.py``, and would write into ``data/``.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

DATA_VAR = "ATTNLIB_DATA_DIR"  # attnlib.paths.ENV_VAR (not imported here: importing attnlib imports torch)
_state = pytest.StashKey[tuple]()


def pytest_configure(config: pytest.Config) -> None:
    folder = Path(tempfile.mkdtemp(prefix="attnlib-test-data-"))
    config.stash[_state] = (folder, os.environ.get(DATA_VAR))
    os.environ[DATA_VAR] = str(folder)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    folder, _ = config.stash.get(_state, (None, None))
    saved = sorted(p for p in folder.rglob("*") if p.is_file()) if folder else []
    if saved:
        names = ", ".join(f"{p.relative_to(folder)} ({p.stat().st_size / 1e3:.0f} kB)" for p in saved)
        terminalreporter.write_line(f"saved under test into {DATA_VAR}={folder} (removed at exit; data/ untouched): {names}")


def pytest_unconfigure(config: pytest.Config) -> None:
    folder, before = config.stash.get(_state, (None, None))
    if folder is None:
        return
    if before is None:
        os.environ.pop(DATA_VAR, None)
    else:
        os.environ[DATA_VAR] = before
    shutil.rmtree(folder, ignore_errors=True)
