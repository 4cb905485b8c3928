# runledger's front door. `make demo` runs the main job; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The development equipment (harness/) and the example agents it drives, named explicitly: a
# deployment installs neither. The system checks that say so are silenced for these processes,
# and they may start on the embedded defaults (SQLite, the filesystem broker) with DEBUG off.
EQUIPMENT := RUNLEDGER_HARNESS=1 RUNLEDGER_ALLOW_EMBEDDED=1 RUNLEDGER_AGENT_MODULES=$${RUNLEDGER_AGENT_MODULES:-ledger.examples.agents} \
	RUNLEDGER_SILENCED_CHECKS=runledger.E001,runledger.W001

# serve: the production stack on one machine (see README, Deploy at scale).
.PHONY: demo serve docs test test-under-load lint typecheck check killtest soak bench bench-concurrency bench-workers bench-starts bench-dashboard bench-dashboard-load screenshots clean

$(STAMP): pyproject.toml client/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./client
	@touch $(STAMP)

## The main job on the embedded defaults (SQLite file, no server needed).
demo: $(STAMP)
	$(EQUIPMENT) $(PY) manage.py migrate -v0
	$(EQUIPMENT) RUNLEDGER_LOG_FORMAT=$${RUNLEDGER_LOG_FORMAT:-plain} $(PY) manage.py demo

## The production stack on this machine: migrate, collectstatic, then gunicorn, a Celery worker
## and Celery beat until Ctrl-C, configured by the same environment variables as a deployment.
serve: $(STAMP)
	$(PY) manage.py serve

## The suite on PostgreSQL (DATABASE_URL, or a throwaway server), then the engine on SQLite.
## TEST_JOBS pytest-xdist processes (default 2), a test file's tests all in one of them; each
## has its own test database (test_<name>_gw0 …); the files holding slow tests are handed out
## first (tests/conftest.py). TEST_JOBS=0 runs the suite in this process.
TEST_JOBS ?= 2
TEST_XDIST := $(if $(filter 0,$(TEST_JOBS)),-p no:xdist,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)
test: $(STAMP)
	harness/ensure_chromium.sh
	$(PY) harness/with_postgres.py $(PY) -m pytest -q $(TEST_XDIST) $(PYTEST_ARGS)
	env -u DATABASE_URL RUNLEDGER_VAR_DIR=$$(mktemp -d) $(PY) -m pytest -q -m sqlite_ok $(TEST_XDIST) $(PYTEST_ARGS)

## The whole `make test` while a CPU hog keeps every core busy (stress-ng from Debian, or a
## Python busy loop per core); the hog is stopped when the suite ends or fails.
test-under-load: $(STAMP)
	$(PY) harness/under_load.py $(MAKE) test PYTEST_ARGS="$(PYTEST_ARGS)" TEST_JOBS="$(TEST_JOBS)"

PEERS := .venv-peers/bin/python
$(PEERS):
	$(PYTHON) -m venv .venv-peers
	$(PEERS) -m pip install -q dbos langgraph langgraph-checkpoint-postgres "psycopg[binary]"

## The README's screenshots, taken by the browser tests from real pages.
screenshots: $(STAMP)
	harness/ensure_chromium.sh
	RUNLEDGER_SCREENSHOTS=$(CURDIR)/docs/screenshots $(PY) harness/with_postgres.py $(PY) -m pytest -q -m browser

## The engine's write path against the floor and against peers (DBOS, LangGraph, in their own
## virtualenv) on one throwaway PostgreSQL with fsync on, in alternating rounds; then resume at
## size and concurrent runs, each lever on the step write, and throughput with real workers
## (make bench-workers' measurement) and with 1, 2, 4, 8 worker processes beside pgbench's
## INSERT+COMMIT with as many clients, resume time and peak memory at 1,000 / 10,000 / 100,000
## steps (bench_growth), the HTTP API (starts per second with 1 and 8 clients,
## finish-to-wait latency), starts one by one against batched (bench_starts), the adapters'
## overhead per step against the plain framework runs; then the SQLite default.
## Figures go to bench-results.json, the profile of the read step to bench-profile.txt.
BENCH_ARGS ?=
bench: $(STAMP) $(PEERS)
	rm -f bench-results.json
	$(EQUIPMENT) WITH_POSTGRES_FSYNC=on $(PY) harness/with_postgres.py sh -c '\
		$(PY) manage.py bench_engine --peers $(PEERS) --json bench-results.json \
			--profile bench-profile.txt $(BENCH_ARGS) && \
		$(PY) manage.py bench_levers --rounds 3 --json bench-results.json && \
		$(PY) manage.py bench_pacing --runs 20 --json bench-results.json && \
		$(PY) manage.py bench_growth --json bench-results.json && \
		$(PY) manage.py bench_workers --ladder 1,2,4,8 --json bench-results.json && \
		$(PY) manage.py bench_api --json bench-results.json && \
		$(PY) manage.py bench_starts --json bench-results.json && \
		$(PY) manage.py bench_adapters --json bench-results.json && \
		RUNLEDGER_AGENT_MODULES=ledger.examples.agents,tests.support.claude_agents \
			$(PY) manage.py shell < harness/bench/claude_agent_sdk.py && \
		$(PY) manage.py shell < harness/bench/openai_agents.py && \
		$(PY) manage.py bench_concurrency --peers $(PEERS) --json bench-results.json'
	env -u DATABASE_URL $(EQUIPMENT) RUNLEDGER_VAR_DIR=$$(mktemp -d) $(PY) manage.py bench_engine \
		--rounds 2 --resume-steps 2000 --concurrent 0 --json bench-results.json

## Runs in flight (issue 31): R = 10, 100, 1,000 runs of 5 model calls (a loopback model that
## answers after 2 s) and 5 reads started at once, on real `runledger worker` processes (threads
## -c R, prefork -c 8 up to R = 100, async agents where @agent takes an async def) beside DBOS's
## sync and async workflows (.venv-peers), alternating, on one throwaway PostgreSQL with fsync on;
## wall time, runs/s started, peak RSS of the workers, peak connections, errors, into
## bench-results.json. R = 5,000 too: BENCH_CONCURRENCY_ARGS=--with-5000.
BENCH_CONCURRENCY_ARGS ?=
bench-concurrency: $(STAMP) $(PEERS)
	$(EQUIPMENT) WITH_POSTGRES_FSYNC=on $(PY) harness/with_postgres.py sh -c '\
		$(PY) manage.py migrate -v0 && $(PY) manage.py bench_concurrency --peers $(PEERS) \
			--json bench-results.json $(BENCH_CONCURRENCY_ARGS)'

## Throughput with real workers: 1,000 runs x 20 steps on 2 Celery worker processes (4 pool
## children each) over the default filesystem broker and over a private redis-server.
bench-workers: $(STAMP)
	$(EQUIPMENT) WITH_POSTGRES_FSYNC=on $(PY) harness/with_postgres.py sh -c '\
		$(PY) manage.py migrate -v0 && $(PY) manage.py bench_workers $(BENCH_ARGS)'

## Runs started per second, one by one against batched (ledger.api.start_runs, POST
## /api/v1/runs/batch), in process and over HTTP, and each way of publishing a batch to the broker.
bench-starts: $(STAMP)
	$(EQUIPMENT) WITH_POSTGRES_FSYNC=on $(PY) harness/with_postgres.py \
		$(PY) manage.py bench_starts --json bench-results.json $(BENCH_ARGS)

## The kill test: SIGKILL real Celery workers mid-run, then check results and effects.
## KILLTEST_TRIALS trials (default 200); PostgreSQL from DATABASE_URL or a throwaway server.
KILLTEST_TRIALS ?= 200
killtest: $(STAMP)
	@$(EQUIPMENT) $(PY) harness/with_postgres.py $(PY) manage.py killtest --trials $(KILLTEST_TRIALS)

## The soak: SOAK_TRIALS (1000) trials mixing SIGKILL at every crash point and at random,
## SIGSTOP zombies and database connection cuts, on the filesystem broker and a private Redis;
## no batch starts after SOAK_MINUTES (45). The last line is the summary.
SOAK_TRIALS ?= 1000
SOAK_MINUTES ?= 45
soak: $(STAMP)
	@$(EQUIPMENT) $(PY) harness/with_postgres.py $(PY) manage.py soak --trials $(SOAK_TRIALS) --minutes $(SOAK_MINUTES)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy ledger runs harness client/src

check: lint typecheck test

## Dashboard figures: SCALE=100k (100,000 runs, 1,000,000 steps; the default) or SCALE=1m
## (1,000,000 runs, 10,000,000 steps) seeded with COPY into an empty PostgreSQL (DATABASE_URL,
## or a throwaway server), then each page's server time and queries, into bench-results.json.
SCALE ?= 100k
SCALE_RUNS_100k := 100000
SCALE_RUNS_1m := 1000000
SCALE_RUNS := $(SCALE_RUNS_$(SCALE))
bench-dashboard: $(STAMP)
	@test -n "$(SCALE_RUNS)" || { echo "SCALE must be 100k or 1m, not '$(SCALE)'" >&2; exit 2; }
	$(EQUIPMENT) $(PY) harness/with_postgres.py sh -c '$(PY) manage.py migrate -v0 && \
		$(PY) manage.py seed_bulk --runs $(SCALE_RUNS) --steps $(SCALE_RUNS)0 && \
		$(PY) manage.py bench_dashboard --json bench-results.json --label dashboard_$(SCALE)'

## The dashboard under load: 20,000 runs in a throwaway PostgreSQL, then 20 signed-in clients
## through a real gunicorn for a minute (one request a second each), after one client alone for
## a minute (the pages' own time); p50/p95/p99 per page.
bench-dashboard-load: $(STAMP)
	$(EQUIPMENT) $(PY) harness/with_postgres.py sh -c '$(PY) manage.py migrate -v0 && \
		$(PY) manage.py seed_bulk --runs 20000 --steps 200000 --big-steps 2000 --audit 20000 && \
		$(PY) manage.py bench_dashboard_load --clients 1,20 --seconds 60'

## This documentation site, into site/ (strict: a broken link or a missing page fails the build).
docs: $(STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
