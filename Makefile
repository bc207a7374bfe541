# Two commands on a fresh machine: `make demo` and `make test`.
# Each bootstraps .venv and installs what it needs (once per pyproject change).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned here, not in the package metadata: 2.13.0 is the CPU build on
# this machine kind's disk; an unpinned torch would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet '$(TORCH)'
	$(BIN)/python -m pip install --quiet -e '.[dev,models,onnx,train]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/ragpulse demo $(DEMO_ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/cheap_tier.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
