# The two commands a newcomer needs:  make lab   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Jupyter refuses to start as root unless told; only add the flag when we really are root (containers, CI).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: install lab test unit notebooks browser execute benchmark models lock clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

## Command 1: install everything and open the series in JupyterLab.
lab: install
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) notebooks/00_start_here.ipynb

## Command 2: install everything and run the whole test suite
## (unit tests, every notebook through nbval, the browser tests).
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

## Retrain the small models that notebook 08 loads from data/ (notebooks 02 and 07 save them when they run).
models: install
	$(PY) tools/execute_notebooks.py notebooks/02_bahdanau_attention.ipynb notebooks/07_transformer_block.ipynb

lock:
	rm -rf /tmp/attn-lock-venv && python3 -m venv /tmp/attn-lock-venv
	/tmp/attn-lock-venv/bin/pip install --quiet -r requirements.in
	{ sed -n "1,4p" requirements.txt; /tmp/attn-lock-venv/bin/pip freeze | sed "s/+cpu$$//"; } > requirements.lock.tmp && mv requirements.lock.tmp requirements.txt

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
