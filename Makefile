# Every target sets up .venv itself from pyproject.toml and the pinned constraints.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit load clean

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed; set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $@

demo: $(STAMP)
	$(BIN)/rollout-sdk demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

test: lint typecheck
	$(BIN)/pytest -q

# The 300-rollout load on the local server (outside load driver, loopback only).
load: $(STAMP)
	$(BIN)/python -m bench.load --rollouts 300 --concurrency 50 --store sqlite

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .rollout-state
