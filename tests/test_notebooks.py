"""The notebooks as committed: executed top to bottom in one run, with outputs a reader can trust.

nbval (``make notebooks``) re-runs every notebook and checks its asserts; these tests check
the *stored* files, which is what a reader sees on GitHub.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROGRESS = re.compile(r"(\d+)%\|")  # tqdm's "desc:  42%|####      | 5/12 [...]"
MACHINE_PATHS = re.compile(r"/(root|home|tmp|work)/")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]


def output_texts(cell: dict) -> list[str]:
    texts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            texts.append("".join(out["text"]))
        for mime in ("text/plain", "text/html"):
            if mime in out.get("data", {}):
                texts.append("".join(out["data"][mime]))
    return texts


def test_the_series_is_all_here():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(10)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_executed_top_to_bottom_in_one_run(path):
    nb = load(path)
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3", "without a kernelspec Jupyter asks for a kernel"
    counts = [c["execution_count"] for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), f"execution counts {counts}: not one run from the top"
    errors = [o for c in code_cells(nb) for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == [], f"stored error outputs: {[e['ename'] for e in errors]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_progress_bars_show_how_far_they_got(path):
    """attnlib.progress_bar rewrites its output when it closes; a bare tqdm would be stored at 0%."""
    stuck = [text for c in code_cells(load(path)) for text in output_texts(c)
             if any(int(p) != 100 for p in PROGRESS.findall(text))]
    assert stuck == [], f"progress bars saved before they finished: {stuck[:3]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_name_no_path_of_this_machine(path):
    leaks = [text[:120] for c in code_cells(load(path)) for text in output_texts(c) if MACHINE_PATHS.search(text)]
    assert leaks == []
