# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint proto proto-lock bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentrt demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

proto: $(STAMP)
	$(BIN)/python proto/generate.py

# Move proto/v1.lock.binpb (what `buf breaking` checks against) to the current contract;
# refuses over a break (proto/lock.py --accept-break, and list it in CHANGELOG.md).
proto-lock: $(STAMP)
	$(BIN)/python proto/lock.py

bench: $(STAMP)
	$(BIN)/python bench/step_loop.py

clean:
	rm -rf $(VENV) .agentrt
