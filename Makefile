# The two commands of the README: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The distributions of the workspace (see pyproject.toml), installed editable, dependencies first.
DISTS := proto tool_host tool_host/mcp clients runtime_server plugins testing

.PHONY: demo test test-ts docs lint proto proto-ts proto-lock bench bench-quick wheels clean

# A venv made before the split into distributions holds the old single distribution "agentrt",
# whose editable finder would shadow the agentrt namespace: it is uninstalled first.
# agentrt.toolhost is a regular package that tool_host/mcp nests a subpackage in; it is installed
# editable by path (compat) too, so the nested distribution's namespace finder cannot shadow it.
$(STAMP): pyproject.toml $(DISTS:%=%/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip uninstall --quiet --yes agentrt 2>/dev/null || true
	$(BIN)/pip install --quiet $(DISTS:%=-e ./%) -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps --config-settings editable_mode=compat -e ./tool_host
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentrt demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint docs
	$(BIN)/pytest
	$(MAKE) test-ts

# The docs site (mkdocs.yml) into build/site; --strict fails on a broken link, snippet or reference.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

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

# Issue 19's figures against their goals (a few minutes), and the quick gate (under a minute,
# SQLite only): `make bench-quick AGAINST=../main` runs another checkout side by side.
bench: $(STAMP)
	$(BIN)/python bench/step_loop.py $(if $(AGAINST),--against $(AGAINST))

bench-quick: $(STAMP)
	$(BIN)/python bench/step_loop.py --quick $(if $(AGAINST),--against $(AGAINST))

# One wheel per distribution, into dist/ (stale build/ output would end up in the wheels).
wheels: $(STAMP)
	rm -rf $(DISTS:%=%/build)
	$(BIN)/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist $(DISTS:%=./%)

clean:
	rm -rf $(VENV) .agentrt dist clients/typescript/node_modules clients/typescript/dist clients/typescript/build-test
