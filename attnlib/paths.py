"""Where the series' small trained models live, so a notebook runs from any working directory.

The committed models sit in the project's ``data/`` folder, found from this package's own
location, never from the notebook's working directory. When the environment variable
``ATTNLIB_DATA_DIR`` names a folder, saves go there instead (the test suite points it at a
temporary folder, so running the notebooks under test never rewrites the committed files),
and loads look there first and fall back to ``data/``.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "ATTNLIB_DATA_DIR"


def project_data_dir() -> Path:
    """The project's ``data/`` folder (beside the ``attnlib`` package in a checkout)."""
    return Path(__file__).resolve().parents[1] / "data"


def _override() -> Path | None:
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value else None


def save_path(name: str) -> Path:
    """Where a notebook saves the model file ``name``: ``$ATTNLIB_DATA_DIR/name`` if set, else ``data/name``."""
    folder = _override() or project_data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def model_path(name: str) -> Path:
    """Where to load the model file ``name`` from: ``$ATTNLIB_DATA_DIR/name`` if that file exists, else ``data/name``.

    Raises FileNotFoundError naming every place it looked when the file is in neither.
    """
    places = [p / name for p in (_override(), project_data_dir()) if p is not None]
    for place in places:
        if place.is_file():
            return place
    raise FileNotFoundError(
        f"no saved model {name!r}; looked in {', '.join(str(p.parent) for p in places)}. "
        "Run the notebook that trains it (how: site/models.md, 'The small trained models')."
    )
