"""The test harness and the install scripts: what they promise in the README holds.

* A test run never writes into the repository: kernels started under test save models to the
  session's temporary ``ATTNLIB_DATA_DIR`` (conftest.py).
* ``make`` refuses a Python older than pyproject's ``requires-python``, and that minimum is the
  true one for the pinned requirements.
* ``tools/install_torch.py`` tells a CPU wheel from a CUDA one and picks the CPU build when
  there is no NVIDIA GPU.
* The browser tests find Chromium or Chrome wherever it usually lives, and any true ``CI``
  makes a missing browser a failure.
* The README links every page of the site (``site/*.md``) and lists every notebook.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requires_python() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]


# --- the session's data folder ----------------------------------------------------------------

def test_the_session_saves_models_outside_the_repository():
    from attnlib.paths import ENV_VAR, save_path

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    root_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root_conftest)
    assert root_conftest.DATA_VAR == ENV_VAR
    folder = Path(os.environ[ENV_VAR]).resolve()
    assert ROOT not in (folder, *folder.parents), f"{ENV_VAR}={folder} lies inside the repository"
    assert save_path("probe.pt").parent.resolve() == folder


def test_a_kernel_started_under_test_sees_the_temporary_folder():
    """nbval starts its kernels the same way (jupyter_client, this process's environment)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        "import os\nfrom attnlib.paths import save_path\n"
        "print(os.environ.get('ATTNLIB_DATA_DIR'))\nprint(save_path('probe.pt').parent)"))
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    printed = nb.cells[0].outputs[0]["text"].split("\n")[:2]
    assert printed == [os.environ["ATTNLIB_DATA_DIR"]] * 2


# --- the Python the install needs ----------------------------------------------------------

def pinned() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))


def test_requires_python_is_the_real_minimum_of_the_pins():
    """Each pinned distribution installed here says which Pythons it supports; pyproject's minimum must
    satisfy all of them, and one version lower must not (else the claim is stricter than needed)."""
    from packaging.specifiers import SpecifierSet

    minimum = re.fullmatch(r">=(\d+)\.(\d+)\.(\d+)", requires_python())
    assert minimum, f"{requires_python()}: write the minimum as X.Y.Z"
    major, minor, micro = (int(part) for part in minimum.groups())
    needs = {}
    for name, version in pinned().items():
        meta = importlib.metadata.metadata(name)
        assert meta["Version"].split("+")[0] == version, f"{name} {meta['Version']} installed, {version} pinned"
        # .get: a distribution without Requires-Python (sphinx-mathjax-offline) sets no bound; indexing it raises
        # KeyError once the importlib_metadata backport (pulled in by the site's packages) has been imported
        if meta.get("Requires-Python"):
            needs[name] = SpecifierSet(meta["Requires-Python"])
    too_new = {n: str(s) for n, s in needs.items() if f"{major}.{minor}.{micro}" not in s}
    assert too_new == {}, f"pinned packages that do not support Python {major}.{minor}.{micro}: {too_new}"
    lower = f"{major}.{minor}.{micro - 1}" if micro else f"{major}.{minor - 1}.99"
    assert any(lower not in s for s in needs.values()), f"every pin also supports {lower}: lower requires-python"


def test_readme_states_the_same_minimum_python():
    minimum = requires_python().removeprefix(">=")
    readme = (ROOT / "README.md").read_text()
    assert f"Python {minimum}" in readme
    assert not re.search(r"Python 3\.(?:[0-9]|10)\+", readme), "the README still claims an older minimum"


def test_readme_links_reach_the_site_pages_and_lists_every_notebook():
    """The README is a page: what it left out lives on the site's pages (site/*.md), each linked from it by a
    relative link that works on GitHub too; its table names every notebook there is."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)]*))?\)", readme)
    local = [link for link, _ in links if "://" not in link]
    assert [link for link in local if not (ROOT / link).is_file()] == [], "README links to files that do not exist"
    for link, anchor in links:  # an anchor is a heading of the page, slugged as GitHub and MyST both do
        if anchor and "://" not in link:
            headings = re.findall(r"^#+ (.+)$", (ROOT / link).read_text(), re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to {link}#{anchor}, which has no such heading: {sorted(slugs)}"
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "site").glob("*.md") if p.stem != "index"}
    assert pages, "no site pages found"
    assert pages - set(local) == set(), "site pages the README does not link"
    numbers = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    listed = set(re.findall(r"^\| (\d\d) \|", readme, re.MULTILINE))
    assert numbers - listed == set(), "notebooks missing from the README's table"


@pytest.mark.parametrize("version, ok", [("3.9.18", False), ("3.10.12", False), ("3.11.4", False), ("3.11.5", True),
                                         ("3.12.0", True), ("3.13.1", True)])
def test_check_python_judges_the_version(version, ok):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "check_python.py"), version],
                         capture_output=True, text=True)
    assert (out.returncode == 0) == ok
    if not ok:
        assert f"needs Python {requires_python().removeprefix('>=')} or newer" in out.stderr
        assert "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine (Windows): site/install.md gives the commands")
def test_make_refuses_an_old_python_before_creating_anything(tmp_path):
    fake = tmp_path / "python3.10"  # answers the version check as an old Python would; fails loudly otherwise
    fake.write_text(f'#!/bin/sh\n[ "$1" = tools/check_python.py ] && exec "{sys.executable}" "$1" 3.10.12\nexit 99\n')
    fake.chmod(0o755)
    out = subprocess.run(["make", "-C", str(ROOT), "install", f"PYTHON={fake}", f"VENV={tmp_path / 'venv'}"],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert f"needs Python {requires_python().removeprefix('>=')} or newer" in out.stderr
    assert "make install PYTHON=python3." in out.stderr
    assert not (tmp_path / "venv").exists()


# --- which torch build ---------------------------------------------------------------------

PYPI_REQUIRES = [  # torch 2.13.0's Requires-Dist on PyPI, the same for its Linux, macOS and Windows wheels
    "filelock", "typing-extensions>=4.10.0", "setuptools>=77.0.3", "sympy>=1.13.3", "networkx>=2.5.1", "jinja2",
    "fsspec>=0.8.5",
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3; '
    'platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
    'triton==3.7.1; platform_system == "Linux" and python_version < "3.15"',
    'opt-einsum>=3.3; extra == "opt-einsum"',
]


def test_build_of_tells_cpu_from_cuda():
    torch_tool = load_tool("install_torch")
    assert torch_tool.build_of("2.13.0+cpu", []) == "cpu"
    assert torch_tool.build_of("2.13.0+cu126", []) == "cuda"
    assert torch_tool.build_of("2.13.0", PYPI_REQUIRES) == ("cuda" if sys.platform == "linux" else "cpu")
    assert torch_tool.build_of("2.13.0", PYPI_REQUIRES[:7]) == "cpu"  # a wheel that needs no CUDA library


@pytest.mark.parametrize("mode, offered, gpu, source", [
    ("auto", "cuda", False, "cpu-index"),   # Linux laptop, PyPI: the CPU build instead of several GB
    ("auto", "cuda", True, "configured"),   # Linux with an NVIDIA GPU: PyPI's CUDA build
    ("auto", "cpu", False, "configured"),   # this machine (a local CPU wheel), macOS, Windows: no other host
    ("auto", "cpu", True, "configured"),
    ("cpu", "cuda", True, "cpu-index"),     # asked for CPU on a GPU machine
    ("cuda", "cuda", False, "configured"),  # asked for CUDA without a GPU
])
def test_plan_installs_the_cpu_build_unless_a_gpu_or_the_switch_says_otherwise(mode, offered, gpu, source):
    assert load_tool("install_torch").plan(mode, offered, gpu) == source


def test_the_installed_torch_is_the_pinned_cpu_build_here():
    """On this kind of machine (no NVIDIA GPU) `make install` must have installed a CPU build."""
    torch_tool = load_tool("install_torch")
    if torch_tool.has_nvidia_gpu():
        pytest.skip("this machine has an NVIDIA GPU: TORCH=auto installs the CUDA build")
    version, build = torch_tool.installed()
    assert build == "cpu" and version.split("+")[0] == torch_tool.pinned_torch().split("==")[1]
    assert not [d for d in importlib.metadata.distributions() if d.metadata["Name"].lower().startswith("nvidia-")]


# --- finding a browser -----------------------------------------------------------------------

@pytest.mark.parametrize("value, ci", [("true", True), ("1", True), ("yes", True), ("True", True), ("on", True),
                                       ("", False), ("0", False), ("false", False), ("no", False), (None, False)])
def test_any_true_ci_value_counts(value, ci):
    from browser.helpers import is_ci

    assert is_ci({} if value is None else {"CI": value}) is ci


def test_find_chromium_prefers_the_variable_then_the_path_then_install_folders(tmp_path):
    from browser.helpers import ChromiumNotFound, find_chromium

    exe = tmp_path / "my-chrome"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    nothing = lambda name: None  # noqa: E731
    assert find_chromium({"CHROMIUM_PATH": str(exe)}, which=nothing, places=[]) == str(exe)
    with pytest.raises(ChromiumNotFound, match="CHROMIUM_PATH='/no/such' is not an executable file"):
        find_chromium({"CHROMIUM_PATH": "/no/such"}, which=lambda name: "/usr/bin/chromium", places=[])
    on_path = {"google-chrome-stable": "/opt/google/chrome/chrome"}
    assert find_chromium({}, which=on_path.get, places=[exe]) == "/opt/google/chrome/chrome"
    assert find_chromium({}, which=nothing, places=[tmp_path / "absent", exe]) == str(exe)
    with pytest.raises(ChromiumNotFound, match="CHROMIUM_PATH"):
        find_chromium({}, which=nothing, places=[tmp_path / "absent"])


def test_install_folders_cover_macos_windows_and_snap():
    from browser.helpers import chromium_install_paths

    places = [str(p) for p in chromium_install_paths({"PROGRAMFILES": r"C:\Program Files",
                                                       "LOCALAPPDATA": r"C:\Users\ana\AppData\Local"})]
    assert "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome" in places
    assert "/snap/bin/chromium" in places
    assert any(p.endswith("chrome.exe") and "Program Files" in p for p in places)
    assert any(p.endswith("chrome.exe") and "AppData" in p for p in places)


# --- .ci/run leaves no trace ---------------------------------------------------------------

def ci_run_with_fake_make(tmp_path: Path, test_recipe: str) -> subprocess.CompletedProcess:
    """Run .ci/run in a scratch git repository whose `make test` is ``test_recipe`` (a shell snippet)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / "data").mkdir()
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    (repo / "data" / "model.pt").write_bytes(b"committed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    make = bin_dir / "make"
    make.write_text(f'#!/bin/sh\nif [ "$1" = test ]; then {test_recipe}; fi\nexit 0\n')
    make.chmod(0o755)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CHROMIUM_PATH": sys.executable}
    return subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git and bash")
@pytest.mark.parametrize("recipe, ok, says", [
    ("mkdir -p test-artifacts .pytest_cache tests/__pycache__ && touch test-artifacts/a.png tests/__pycache__/x.pyc",
     True, "left the working tree clean"),
    ("echo retrained > data/model.pt", False, "changed the working tree"),
    ("touch data/new.pt", False, "changed the working tree"),
    ("mkdir -p build && touch build/x", False, "wrote ignored files other than"),
])
def test_ci_run_fails_when_make_test_leaves_a_trace(tmp_path, recipe, ok, says):
    out = ci_run_with_fake_make(tmp_path, recipe)
    assert (out.returncode == 0) == ok, out.stdout + out.stderr
    assert says in out.stdout + out.stderr
