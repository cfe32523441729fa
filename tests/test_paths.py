"""Model files are found through attnlib, whatever the working directory, and tests can redirect saves."""
from __future__ import annotations

import pytest

from attnlib.paths import ENV_VAR, model_path, project_data_dir, save_path


def test_committed_models_are_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    assert model_path("date_attention.pt") == project_data_dir() / "date_attention.pt"
    assert model_path("date_attention.pt").is_file()


def test_saves_go_to_the_override_and_loads_look_there_first(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "scratch"))
    target = save_path("date_attention.pt")
    assert target == tmp_path / "scratch" / "date_attention.pt"
    assert model_path("date_attention.pt") == project_data_dir() / "date_attention.pt"  # not saved yet: fallback
    target.write_bytes(b"x")
    assert model_path("date_attention.pt") == target


def test_a_missing_model_names_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no saved model 'nope.pt'; looked in"):
        model_path("nope.pt")
