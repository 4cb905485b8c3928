# runledger's front door. `make demo` runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck check killtest soak bench bench-dashboard screenshots clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

## The main job on the embedded defaults (SQLite file, no server needed).
demo: $(STAMP)
	$(PY) manage.py migrate -v0
	$(PY) manage.py demo

## The suite on PostgreSQL (DATABASE_URL, or a throwaway server), then the engine on SQLite.
test: $(STAMP)
	tests/ensure_chromium.sh
	$(PY) tests/with_postgres.py $(PY) -m pytest -q $(PYTEST_ARGS)
	env -u DATABASE_URL RUNLEDGER_VAR_DIR=$$(mktemp -d) $(PY) -m pytest -q -m sqlite_ok $(PYTEST_ARGS)

PEERS := .venv-peers/bin/python
$(PEERS):
	$(PYTHON) -m venv .venv-peers
	$(PEERS) -m pip install -q dbos langgraph langgraph-checkpoint-postgres "psycopg[binary]"

## The README's screenshots, taken by the browser tests from real pages.
screenshots: $(STAMP)
	tests/ensure_chromium.sh
	RUNLEDGER_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) tests/with_postgres.py $(PY) -m pytest -q -m browser

## The engine's write path against the floor and against peers (DBOS, LangGraph) on the same
## PostgreSQL, then on the SQLite default.
bench: $(STAMP) $(PEERS)
	$(PY) tests/with_postgres.py sh -c '$(PY) manage.py bench_engine && $(PEERS) tests/bench/peers.py "$$DATABASE_URL" 2>/dev/null | grep -E "^peer"'
	env -u DATABASE_URL RUNLEDGER_VAR_DIR=$$(mktemp -d) $(PY) manage.py bench_engine

## The kill test: SIGKILL real Celery workers mid-run, then check results and effects.
## KILLTEST_TRIALS trials (default 200); PostgreSQL from DATABASE_URL or a throwaway server.
KILLTEST_TRIALS ?= 200
killtest: $(STAMP)
	@RUNLEDGER_HARNESS=1 $(PY) tests/with_postgres.py $(PY) manage.py killtest --trials $(KILLTEST_TRIALS)

## The soak: SOAK_TRIALS (1000) trials mixing SIGKILL at every crash point and at random,
## SIGSTOP zombies and database connection cuts, on the filesystem broker and a private Redis;
## no batch starts after SOAK_MINUTES (45). The last line is the summary.
SOAK_TRIALS ?= 1000
SOAK_MINUTES ?= 45
soak: $(STAMP)
	@RUNLEDGER_HARNESS=1 $(PY) tests/with_postgres.py $(PY) manage.py soak --trials $(SOAK_TRIALS) --minutes $(SOAK_MINUTES)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy ledger runs harness

check: lint typecheck test

## Dashboard figures: 100,000 runs and 1,000,000 steps in an empty PostgreSQL (DATABASE_URL,
## or a throwaway server), then the list's and a 10,000-step run's server time and queries.
bench-dashboard: $(STAMP)
	$(PY) tests/with_postgres.py sh -c '$(PY) manage.py migrate -v0 && \
		$(PY) manage.py seed_bulk --runs 100000 --steps 1000000 && $(PY) manage.py bench_dashboard'

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
