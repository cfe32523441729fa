# The two commands a newcomer needs:  make lab   and   make test
# Options:  make install PYTHON=python3.12   (which Python builds .venv; 3.11.5 or newer)
#           make install TORCH=cpu|cuda|auto (which torch build; auto = CUDA only with an NVIDIA GPU)
PYTHON ?= python3
TORCH ?= auto
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-torch-$(TORCH)
# Jupyter refuses to start as root unless told; only add the flag when we really are root (containers, CI).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: install lab test unit notebooks browser execute benchmark models site lock clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml tools/install_torch.py
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: no '$(PYTHON)' on the PATH; name a Python 3.11.5 or newer with  make install PYTHON=python3.12" >&2; exit 1; }
	@$(PYTHON) tools/check_python.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) tools/install_torch.py $(TORCH)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements-nodeps.txt
	$(PY) -m pip install --quiet --no-deps -e .
	rm -f $(VENV)/.installed $(VENV)/.installed-torch-*
	touch $(STAMP)

## Command 1: install everything and open the series in JupyterLab.
lab: install
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) notebooks/00_start_here.ipynb

## Command 2: install everything and run the whole test suite
## (unit tests, every notebook through nbval, the browser tests). It writes nothing into the
## repository but the gitignored test-artifacts/ and caches: models that notebooks save under
## test go to a temporary folder (see conftest.py).
test: install
	$(PY) -m pytest

## Pieces of the suite, for working on one part.
unit: install
	$(PY) -m pytest tests --ignore=tests/browser

notebooks: install
	$(PY) -m pytest notebooks

browser: install
	$(PY) -m pytest tests/browser

## Re-execute every notebook in place, in order, one at a time (stored outputs = what execution produced).
execute: install
	$(PY) tools/execute_notebooks.py

benchmark: install
	$(PY) benchmarks/attention_benchmark.py

## The static site of the series, from the notebooks as committed (no re-execution), into build/site/
## (open build/site/index.html; publish the folder as it is: see site/the-site.md).
site: install
	$(PY) tools/build_site.py --out build/site

## Retrain the small models saved in data/ (notebooks 02, 07, 10 and 11 save them when they run).
models: install
	$(PY) tools/execute_notebooks.py notebooks/02_bahdanau_attention.ipynb notebooks/07_transformer_block.ipynb notebooks/10_encoder_decoder.ipynb notebooks/11_small_gpt.ipynb

## The lock is made with the CPU build of torch (so no NVIDIA package is pinned) and lists
## setuptools too (torch needs it at run time; a plain `pip freeze` leaves it out).
lock:
	@$(PYTHON) tools/check_python.py
	rm -rf /tmp/attn-lock-venv && $(PYTHON) -m venv /tmp/attn-lock-venv
	/tmp/attn-lock-venv/bin/python -m pip install --quiet --upgrade pip
	/tmp/attn-lock-venv/bin/python tools/install_torch.py cpu
	/tmp/attn-lock-venv/bin/pip install --quiet -r requirements.in
	{ sed -n "1,4p" requirements.txt; /tmp/attn-lock-venv/bin/pip freeze --all --exclude pip | sed "s/+cpu$$//"; } > requirements.lock.tmp && mv requirements.lock.tmp requirements.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis test-artifacts
