# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-ts lint proto proto-ts proto-lock bench clean

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
	$(MAKE) test-ts

# The TypeScript client (clients/typescript): npm ci from the committed lock file, build, and its
# tests, which start this checkout's runtime with the venv's Python (AGENTRT_PYTHON).
test-ts: $(STAMP)
	cd clients/typescript && npm ci --no-audit --no-fund && AGENTRT_PYTHON=$(abspath $(BIN)/python) npm test

proto: $(STAMP)
	$(BIN)/python proto/generate.py
	$(MAKE) proto-ts

proto-ts:
	cd clients/typescript && npm ci --no-audit --no-fund && npm run generate

# Move proto/v1.lock.binpb (what `buf breaking` checks against) to the current contract;
# refuses over a break (proto/lock.py --accept-break, and list it in CHANGELOG.md).
proto-lock: $(STAMP)
	$(BIN)/python proto/lock.py

bench: $(STAMP)
	$(BIN)/python bench/step_loop.py

clean:
	rm -rf $(VENV) .agentrt clients/typescript/node_modules clients/typescript/dist clients/typescript/build-test
