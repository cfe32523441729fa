"""Install the pinned torch into this virtualenv, choosing between its CPU and CUDA builds.

    .venv/bin/python tools/install_torch.py [auto|cpu|cuda]      (make install TORCH=...)

The series runs on a CPU. On Linux, PyPI's wheel for the pinned version is the CUDA build:
several GB, with NVIDIA's libraries, that a machine without an NVIDIA GPU never uses.

* ``auto`` (the default): ``cuda`` when an NVIDIA GPU is present, else ``cpu``.
* ``cpu``: the wheel that pip's configured sources give, when it is a CPU build (macOS,
  Windows, a mirror or wheel folder that holds the CPU wheel); otherwise the same version
  from PyTorch's CPU index (``--no-deps``: ``requirements.txt`` brings the dependencies).
* ``cuda``: the wheel that pip's configured sources give (on Linux, from PyPI, the CUDA
  build); a warning says so when that wheel is not a CUDA build.

pip is asked first which wheel its configured sources would install (``--dry-run --report``,
which reads the package's metadata, not the wheel), so no other host is contacted unless the
CPU build is wanted and those sources do not have it.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pinned_torch(requirements: Path = ROOT / "requirements.txt") -> str:
    """The ``torch==X`` line of requirements.txt."""
    for line in requirements.read_text().splitlines():
        if re.match(r"torch==", line.strip()):
            return line.split("#")[0].strip()
    raise SystemExit(f"{requirements} pins no torch==X")


def has_nvidia_gpu() -> bool:
    """True when the NVIDIA driver reports a GPU (Linux /proc, or nvidia-smi on any platform, WSL included)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi") or next((p for p in ("/usr/lib/wsl/lib/nvidia-smi",) if os.path.exists(p)), None)
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def configured_wheel(requirement: str) -> dict:
    """What ``pip install <requirement>`` would take from pip's configured sources: the report's install item."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
           "--quiet", "--report", "-", requirement]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"pip could not resolve {requirement} from its configured sources:\n{out.stderr}")
    return json.loads(out.stdout)["install"][0]


def _marker_applies(requirement: str) -> bool:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:  # a pip without its vendored packaging: count the requirement
        return True
    marker = Requirement(requirement).marker
    return marker is None or marker.evaluate({"extra": ""})


def build_of(version: str, requires_dist: list[str]) -> str:
    """``"cuda"`` or ``"cpu"``: a ``+cuXXX`` label, or CUDA libraries required on this platform, mean CUDA.

    PyPI's torch 2.13.0 wheels all list ``cuda-toolkit``, ``cuda-bindings`` and ``nvidia-*``
    with the marker ``platform_system == "Linux"``: the Linux wheel is the CUDA build, the
    macOS and Windows wheels are CPU builds. The local ``+cpu`` wheel requires none of them.
    """
    local = version.partition("+")[2]
    if local.startswith("cu"):
        return "cuda"
    if local == "cpu":
        return "cpu"
    cuda = [r for r in requires_dist if re.match(r"(nvidia|cuda)-", r.strip(), re.I) and _marker_applies(r)]
    return "cuda" if cuda else "cpu"


def plan(mode: str, offered: str, gpu: bool) -> str:
    """Where to install torch from: ``"configured"`` (pip's own sources) or ``"cpu-index"``."""
    want = {"auto": "cuda" if gpu else "cpu", "cpu": "cpu", "cuda": "cuda"}[mode]
    return "cpu-index" if want == "cpu" and offered == "cuda" else "configured"


def installed() -> tuple[str, str] | None:
    """``(version, build)`` of the torch already in this environment, if any."""
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    return dist.version, build_of(dist.version, dist.requires or [])


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", *args]
    print("  " + " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="auto", choices=("auto", "cpu", "cuda"),
                        help="which torch build to install (default: auto)")
    mode = parser.parse_args(argv).mode
    requirement = pinned_torch()
    item = configured_wheel(requirement)
    meta = item["metadata"]
    offered = build_of(meta["version"], meta.get("requires_dist") or [])
    gpu = has_nvidia_gpu()
    source = plan(mode, offered, gpu)
    wanted = "cuda" if source == "configured" and offered == "cuda" else "cpu"
    print(f"torch: TORCH={mode}, NVIDIA GPU {'found' if gpu else 'not found'}; pip's configured sources offer "
          f"torch {meta['version']} ({offered} build, {unquote(item['download_info']['url'].rsplit('/', 1)[-1])})")
    if mode == "cuda" and offered != "cuda":
        print(f"torch: warning: TORCH=cuda, but pip's configured sources have no CUDA build of {requirement}; "
              "installing their CPU build. For CUDA, install from the index URL that pytorch.org's selector gives.")
    have = installed()
    pinned = requirement.partition("==")[2]
    force = ["--force-reinstall"] if have is not None else []
    if have is not None and have[0].partition("+")[0] == pinned and have[1] == wanted:
        print(f"torch: {have[0]} ({have[1]} build) is already installed")
    elif source == "cpu-index":
        print(f"torch: installing the CPU build from {CPU_INDEX} (the configured sources only have the CUDA build)")
        pip(*force, "--no-deps", "--index-url", CPU_INDEX, requirement)
    else:
        print(f"torch: installing the {offered} build from pip's configured sources")
        pip(*force, requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
