# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The distributions of the workspace (see pyproject.toml), installed editable, dependencies first.
DISTS := proto tool_host clients runtime_server plugins testing

.PHONY: demo test lint proto bench wheels clean

# A venv made before the split into distributions holds the old single distribution "agentrt",
# whose editable finder would shadow the agentrt namespace: it is uninstalled first.
$(STAMP): pyproject.toml $(DISTS:%=%/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip uninstall --quiet --yes agentrt 2>/dev/null || true
	$(BIN)/pip install --quiet $(DISTS:%=-e ./%) -e '.[dev]'
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

bench: $(STAMP)
	$(BIN)/python bench/step_loop.py

# One wheel per distribution, into dist/ (stale build/ output would end up in the wheels).
wheels: $(STAMP)
	rm -rf $(DISTS:%=%/build)
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist $(DISTS:%=./%)

clean:
	rm -rf $(VENV) .agentrt dist
