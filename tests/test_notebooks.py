"""The notebooks as committed: executed top to bottom in one run, with outputs a reader can trust.

nbval (``make notebooks``) re-runs every notebook and checks its asserts; these tests check
the *stored* files, which is what a reader sees on GitHub, and that a notebook runs from any
folder (it finds the saved models through attnlib, never through ``../data``).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

# Part I is 00-09; Part II is 10-12; Part III is 13.
SERIES = [f"{i:02d}" for i in range(14)]
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PROGRESS = re.compile(r"(\d+)%\|")  # tqdm's "desc:  42%|####      | 5/12 [...]"
MACHINE_PATHS = re.compile(r"""
      /(?:root|home|tmp|work|Users|private/var|var/folders)/   # Linux and macOS homes and temporary folders
    | (?<![A-Za-z0-9])[A-Za-z]:[\\/](?!/)                     # a Windows drive (C:\x or C:/x, not the "s:/" of https://)
    | \\\\[\w.$-]+\\                                         # a Windows network path (\\server\share)
    | \\(?:Users|AppData|Temp)\\                              # Windows homes and temporary folders
""", re.VERBOSE | re.IGNORECASE)
LOADS_DATA = "08_attention_explorer.ipynb"  # loads both saved models and trains nothing (about 10 s)


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
    assert [p.name[:2] for p in NOTEBOOKS] == SERIES


@pytest.mark.parametrize("text", [
    "/root/x", "saved to /home/ana/attention/data", "/tmp/tmpab12/model.pt", "/work/wt/h2/data",
    "/Users/ana/attention-notebooks/data/date_attention.pt", "/private/var/folders/x/T/tmp1",
    "/var/folders/zz/abc/T/tmp1", r"C:\Users\ana\attention\data", "C:/Users/ana/data", r"d:\work\nb",
    r"'C:\\Users\\ana'", r"\\fileserver\share\nb", r"..\AppData\Local\Temp\tmp1",
])
def test_the_machine_path_check_catches(text):
    assert MACHINE_PATHS.search(text)


@pytest.mark.parametrize("text", [
    "https://pytorch.org/get-started/", "file:///models", "ratio 3:1, 2:1", "torch.Size([2, 5, 64])",
    "data/date_attention.pt", "<tmp>/model.safetensors", "step 10/12", "a: 1", "Exercise 7.2: see 08/09",
])
def test_the_machine_path_check_lets_through(text):
    assert not MACHINE_PATHS.search(text)


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_is_attempt_check_and_collapsed_solution(path):
    """The learner's attempt runs as shipped, the check says "not attempted yet", the solution is folded away,
    its output too (the output is the answer: Jupyter and the site hide both), and passes the same check (the
    stored outputs show both)."""
    cells = code_cells(load(path))
    solutions = [i for i, c in enumerate(cells) if "".join(c["source"]).startswith("# Solution")]
    assert solutions, "no exercise solutions found (cells starting '# Solution')"
    for i in solutions:
        sol, checked, attempt = cells[i], cells[i - 1], cells[i - 2]
        where = f"code cell {i}"
        folded = sol["metadata"].get("jupyter", {})
        assert folded.get("source_hidden") is True, f"{where}: the solution is not collapsed"
        assert folded.get("outputs_hidden") is True, \
            f"{where}: the solution's output is on screen; its metadata needs \"jupyter\": {{\"outputs_hidden\": true}}"
        assert "assert check(" in "".join(sol["source"]), f"{where}: the solution does not assert its own check"
        assert any("] correct: " in t for t in output_texts(sol)), f"{where}: the stored solution does not pass its check"
        assert "check(" in "".join(checked["source"]), f"{where}: the cell before a solution must be the check"
        assert any("waiting: not attempted yet" in t for t in output_texts(checked)), \
            f"{where}: the stored check before the solution does not say 'not attempted yet'"
        assert not attempt["metadata"].get("jupyter", {}).get("source_hidden"), f"{where}: the attempt cell is hidden"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_collapsed_cell_hides_its_output_too(path):
    """Any cell whose code is folded away because it gives an answer (not only those starting '# Solution')
    must fold its output too: on screen, the output gives the same answer."""
    shown = [i for i, c in enumerate(code_cells(load(path)))
             if c["metadata"].get("jupyter", {}).get("source_hidden") and c.get("outputs")
             and not c["metadata"].get("jupyter", {}).get("outputs_hidden")]
    assert shown == [], f"code cells {shown}: code collapsed, output on screen (add \"outputs_hidden\": true)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_finds_saved_models_through_attnlib(path):
    """A relative ``../data`` works only when the kernel starts in notebooks/; attnlib.paths works anywhere."""
    relative = [i for i, c in enumerate(code_cells(load(path))) if re.search(r"\.\./data\b", "".join(c["source"]))]
    assert relative == [], f"code cells {relative} read or write ../data; use attnlib.paths.save_path / model_path"


def test_a_notebook_runs_from_an_empty_folder(tmp_path, monkeypatch):
    """Notebook 08, copied alone into an empty folder, runs top to bottom and finds both models through attnlib."""
    import nbformat
    from nbclient import NotebookClient

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    shutil.copy(ROOT / "notebooks" / LOADS_DATA, folder / LOADS_DATA)
    monkeypatch.setenv("ATTNLIB_DATA_DIR", str(tmp_path / "nothing-saved-here"))  # loads fall back to data/
    nb = nbformat.read(folder / LOADS_DATA, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    errors = [o for c in code_cells(nb) for o in c["outputs"] if o["output_type"] == "error"]
    assert errors == []
    assert sorted(p.name for p in folder.iterdir()) == [LOADS_DATA], "the notebook wrote beside itself"
