"""Execute notebooks in place, one at a time, and print how long each took.

    python tools/execute_notebooks.py [notebooks/0*.ipynb ...]

The stored outputs are exactly what this execution produced. Widget state is dropped from
the saved notebook: a saved widget view would need require.js and anywidget from a CDN to
render outside a live kernel, so the widgets' own static preview (text/html) is what GitHub
and nbconvert show instead. (Execution itself keeps nbclient's default of recording widget
state, because its Output-widget capture fails without it.)
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def execute(path: Path) -> tuple[float, float]:
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # timestamps of an earlier run would look like this run's (timing is not recorded)
        cell.metadata.pop("execution", None)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    wall, cpu = time.perf_counter(), cpu_seconds()
    client.execute()
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    return wall, cpu


def main(argv: list[str]) -> None:
    paths = [Path(p) for p in argv] or sorted(Path("notebooks").glob("[0-9]*.ipynb"))
    total = 0.0
    print(f"{'notebook':40s} {'wall s':>7s} {'cpu s':>7s}")
    for path in paths:
        wall, cpu = execute(path)
        total += wall
        print(f"{path.name:40s} {wall:7.1f} {cpu:7.1f}", flush=True)
    print(f"{'total':40s} {total:7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
