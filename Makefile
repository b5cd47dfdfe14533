# gpusched: `make demo` runs the simulator on its built-in cluster, `make test` runs lint, types, layering, the
# test suite and the end-to-end suite on a real API server (tests/e2e/run.sh says why when it has to skip that).
# Both install into a local virtualenv (.venv) first; only python3 (>= 3.11) is needed, and Go for the e2e
# control plane the first time (docs/e2e.md).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint unit e2e bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/gpusched simulate

lint: install
	$(BIN)/ruff check scheduler tests benchmarks
	$(BIN)/ruff format --check scheduler tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

unit: install
	$(BIN)/python -m pytest -q --ignore=tests/e2e $(PYTEST_ARGS)

e2e: install
	PYTHON=$(BIN)/python tests/e2e/run.sh $(PYTEST_ARGS)

test: lint unit e2e

bench: install
	$(BIN)/gpusched bench kernels

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
