# Two commands on a fresh clone: `make demo` and `make test`. Each sets up its own virtual environment.
PYTHON ?= python3
VENV ?= .venv
# Pinned to the CPU build available here; override e.g. `make test VENV=.venv-torch-2.6.0 TORCH_SPEC="torch==2.6.0"`
# (the floor in pyproject.toml; from PyPI a CUDA build, about 3 GB). A CUDA build from PyTorch's own index:
# `make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126` (the index of your CUDA version).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS ?= data,datasets,dev,hf,bench
BIN := $(VENV)/bin
# Each `make demo` trains into a fresh run directory, so running it twice never collides.
DEMO_DIR := runs/demo-$(shell date +%Y%m%d-%H%M%S)

.PHONY: setup demo test test-slow test-hf-releases lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

demo: setup
	$(BIN)/markovformer train output_dir=$(DEMO_DIR)
	$(BIN)/markovformer inspect $(DEMO_DIR)

# The suite runs on two pytest-xdist workers (one per core of the CI machine); `make test PYTEST_WORKERS=0` runs it
# in one process. It ends with its 25 slowest tests, so that a slow one shows in every CI log.
PYTEST_WORKERS ?= 2

test: setup
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --durations=25

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

# The HF wrappers against other transformers releases of the hf extra's range (>=5.0,<6; `.venv` has the newest),
# each in a virtual environment of its own: `make test-hf-releases HF_RELEASES="5.0.0 5.17.0"`.
HF_RELEASES ?= 5.0.0 5.17.0

test-hf-releases:
	set -e; for release in $(HF_RELEASES); do \
	  venv=$(VENV)-transformers-$$release; \
	  if [ ! -f $$venv/.installed ]; then \
	    $(PYTHON) -m venv $$venv; \
	    $$venv/bin/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)); \
	    $$venv/bin/python -m pip install -q -e ".[dev,hf]" "transformers==$$release"; \
	    touch $$venv/.installed; \
	  fi; \
	  echo "tests/hf with transformers $$release:"; \
	  $$venv/bin/python -m pytest -q -n $(PYTEST_WORKERS) tests/hf; \
	done

lint: setup
	$(BIN)/ruff check src tests

bench: setup
	$(BIN)/markovformer bench

clean:
	rm -rf $(VENV) $(VENV)-transformers-* $(VENV)-torch-* build *.egg-info src/*.egg-info .pytest_cache
