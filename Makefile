# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# On a machine without torch, torch==2.13.0 is installed first (a CPU build where one is
# provided locally), so a CPU-only machine never downloads multi-GB CUDA wheels; a torch that
# is already importable by $(PYTHON) is kept (the venv then sees the system site-packages).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN ?= torch==2.13.0

.PHONY: setup demo test bench-cpu clean

$(VENV)/.installed: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "torch found: the venv reuses it"; $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else \
	    $(PYTHON) -m venv $(VENV); \
	  fi; \
	fi
	@$(PY) -c "import torch" >/dev/null 2>&1 || $(PIP) install -q "$(TORCH_PIN)"
	@$(PIP) install -q --upgrade "pip>=21.3" >/dev/null 2>&1 || true   # editable installs from pyproject.toml (PEP 660)
	$(PIP) install -q -e ".[test]"
	@$(PIP) install -q -e ".[cuda]" || echo "note: CUDA extras (cuda-bindings, NVRTC) not installed; NVRTC tests will be skipped"
	@touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) tools/demo.py

# Two workers: most of the suite's time is g++ / NVRTC compiling kernels, one per process.
PYTEST_WORKERS ?= 2

# The import contracts (.importlinter: imports flow one way) first: an upward import fails here.
# (lint-imports through the venv's python: with --system-site-packages its script may live elsewhere)
LINT_IMPORTS := $(PY) -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

test: setup
	$(LINT_IMPORTS)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) tests

bench-cpu: setup
	$(PY) tools/bench.py --device cpu

clean:
	rm -rf $(VENV) *.egg-info
