# Two commands on a fresh machine: `make demo` and `make test`.
# Each bootstraps .venv and installs what it needs (once per pyproject change).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck bench install clean prometheus chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned here, not in the package metadata: 2.13.0 is the CPU build on
# this machine kind's disk; an unpinned torch would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet '$(TORCH)'
	# setuptools prints an 8-line notice on every editable install (no pyproject switch turns
	# it off); this filter silences that notice only.
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[dev,models,onnx,train]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/ragpulse demo $(DEMO_ARGS)

test: $(STAMP) prometheus typecheck
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# mypy strict over every module of the package as users get it: a real (non-editable)
# install into build/typed, checked from inside that folder so that nothing of the
# source tree can stand in for it. Prints how many modules it checked.
TYPED := build/typed
typecheck: $(STAMP)
	rm -rf $(TYPED)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --target $(TYPED) . \
	  2>&1 | grep -v "^WARNING: Location" || true
	cd $(TYPED) && ../../$(BIN)/mypy --config-file ../../pyproject.toml \
	  --cache-dir ../mypy-cache -p ragpulse

# Debian's prometheus package (2.42: promtool and the server, no service started)
# for the rule unit tests and the live-Prometheus test. Never fails the build:
# without apt or root those tests skip, saying why.
prometheus:
	@command -v promtool >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  APT="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"; \
	  { $$APT install -y --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { $$APT update >/dev/null 2>&1 && \
	      $$APT install -y --no-install-recommends prometheus >/dev/null 2>&1; }; } \
	  && echo "installed Debian's prometheus package (promtool, prometheus)" \
	  || echo "prometheus not installable here (apt-get failed or no root): promtool and live-Prometheus tests will be skipped"; }

# Debian's chromium for the headless check of the sliced HTML report
# (tests/test_report_browser.py). Never fails the build: without apt or root that test skips.
chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  APT="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"; \
	  { $$APT install -y --no-install-recommends chromium >/dev/null 2>&1 || \
	    { $$APT update >/dev/null 2>&1 && \
	      $$APT install -y --no-install-recommends chromium >/dev/null 2>&1; }; } \
	  && echo "installed Debian's chromium package (headless HTML report test)" \
	  || echo "chromium not installable here (apt-get failed or no root): the HTML report browser test will be skipped"; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/cheap_tier.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
