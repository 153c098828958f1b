# One command per check, used by people and CI alike.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: serve test check lint format typecheck layers bench bench-peers clean js

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,embedded,bench]'
	touch $(STAMP)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

## serve: hub + REST + dispatcher on an embedded PostgreSQL (http://127.0.0.1:8000)
serve: $(STAMP)
	$(BIN)/realtime-dispatch serve

## test: the whole test suite (real PostgreSQL: embedded unless REALTIME_TEST_DATABASE_URL is set)
test: $(STAMP) node_modules/.package-lock.json bench-peers
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --dist loadfile

## check: lint, format, strict typing and the layer contracts
check: lint typecheck layers

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

format: $(STAMP)
	$(BIN)/ruff format src tests bench examples
	$(BIN)/ruff check --fix src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

## layers: the import contracts of pyproject.toml (docs/architecture.md)
layers: $(STAMP)
	$(BIN)/lint-imports --no-cache

## js: regenerate the TypeScript SDK's types and rebuild its dist/ and committed browser bundle
js: $(STAMP) node_modules/.package-lock.json
	$(BIN)/python scripts/gen_js_types.py
	node clients/js/scripts/build.mjs

## bench-peers: the Go peers of bench/hub_peers.py, built from Debian's Go packages (.ci/run
## installs them) into build/bench-go/ unless already built from the current source
bench-peers: $(STAMP)
	$(BIN)/python bench/hub_peers.py build

bench: $(STAMP)
	$(BIN)/python bench/drain.py
	$(BIN)/python bench/lag.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
