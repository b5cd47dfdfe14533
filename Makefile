# gpusched: `make demo` runs the simulator on its built-in cluster, `make test` runs lint, types, layering and
# the test suite. Both install into a local virtualenv (.venv) first; only python3 (>= 3.11) is needed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install demo test lint unit bench clean

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
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test: lint unit

bench: install
	$(BIN)/gpusched bench kernels

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
