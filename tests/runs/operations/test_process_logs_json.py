"""Every line a real gunicorn, Celery worker and Celery beat write is a JSON object (finding 4 of
issue 24: gunicorn's own lines, its access log and Celery's banner were plain text), and the
unhandled errors among them name their request or their run."""

from __future__ import annotations

import json
import re

import pytest

from harness.cluster import database_url
from ledger.models import Run
from tests.support.processes import (
    beat,
    deployment_env,
    free_port,
    get,
    gunicorn,
    json_lines,
    manage,
    redis_reachable,
    wait_for,
    worker,
)

pytestmark = [pytest.mark.slow]
TOKEN = "scrape-token-1"


def test_gunicorns_lines_and_access_log_are_json_and_a_500_names_its_request(tmp_path) -> None:
    """The issue's outage: the database is unreachable and /metrics answers 500."""
    env = deployment_env(
        tmp_path,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gone",
        RUNLEDGER_METRICS_TOKEN=TOKEN,
        WEB_CONCURRENCY="1",
    )
    port = free_port()
    web = gunicorn(env, tmp_path, port)
    base = f"http://127.0.0.1:{port}"
    try:
        assert get(base + "/healthz")[0] == 200
        assert get(base + "/accounts/login/")[0] == 200
        status, headers, _ = get(base + "/metrics", Authorization=f"Bearer {TOKEN}")
        assert status == 500
        request_id = headers.get("X-Request-ID", "(none)")
        anonymous = get(base + "/metrics")[0]
        wait_for(lambda: web.output().count(request_id) >= 2, timeout=30)  # error and access
    finally:
        web.stop()
    records = json_lines(web.output())
    assert any(r["logger"] == "gunicorn.error" and "Listening at" in r["message"] for r in records)
    (error,) = [r for r in records if r["level"] == "ERROR" and r["logger"] == "django.request"]
    assert error["path"] == "/metrics" and error["method"] == "GET"
    assert error["request_id"] == request_id and error["client"] == "127.0.0.1"
    assert "OperationalError" in error["exc_info"]
    access = [r for r in records if r["logger"] == "gunicorn.access"]
    assert {(r["path"], r["status"]) for r in access} >= {
        ("/healthz", 200),
        ("/accounts/login/", 200),
        ("/metrics", 403),
        ("/metrics", 500),
    }
    failed = next(r for r in access if r["status"] == 500)
    assert failed["request_id"] == request_id and failed["duration_ms"] >= 0
    assert anonymous == 403  # /metrics without the token, even from loopback


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not redis_reachable(), reason="needs Redis on 127.0.0.1:6379")
def test_a_celery_worker_and_beat_write_json_only_and_a_failed_run_names_its_run_and_step(
    tmp_path,
) -> None:
    env = deployment_env(tmp_path, DATABASE_URL=database_url())
    work = worker(env, tmp_path)
    sched = beat(env, tmp_path)
    try:
        started = manage(env, "start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}')
        assert started.returncode == 0, started.stderr
        run_id = re.search(r"run_\w+", started.stdout).group(0)  # type: ignore[union-attr]
        assert wait_for(
            lambda: Run.objects.filter(pk=run_id, status="failed").exists(), timeout=120
        ), Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        sched.wait_for_output("runledger.sweep")
    finally:
        sched.stop()
        work.stop()
    records = json_lines(work.output())
    banner = next(r for r in records if r["message"].startswith("celery worker"))
    assert banner["concurrency"] == 1 and env["RUNLEDGER_QUEUE"] in banner["queues"]
    assert "runledger.start_run" in banner["tasks"] and ":6379/7" in banner["broker"]
    (failure,) = [r for r in records if r["level"] == "ERROR" and r.get("run_id") == run_id]
    assert failure["step_id"].startswith("fetch_invoice") and "inv_404" in failure["message"]
    assert failure["task_id"]
    assert any(r["message"].endswith(" ready.") for r in records)
    beat_records = json_lines(sched.output())
    assert any(r["message"] == "celery beat starting" for r in beat_records), sched.output()
    assert json.dumps(beat_records)  # every line parsed


def test_the_pool_loggers_lines_are_json_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Celery gives billiard's pool logger (it does not propagate to the root) a handler of its
    own, in Celery's text format: a worker's shutdown line "Process 'ForkPoolWorker-1' …
    exited with 'signal 15 (SIGTERM)'" came out as text among the JSON lines. After Celery's
    logging is set up, that handler writes JSON too (what a real worker runs:
    ``Logging.setup_logging_subsystem``, which sends ``after_setup_logger``)."""
    import io
    import logging

    from celery.utils.log import get_multiprocessing_logger

    from runs.celery import app

    monkeypatch.setenv("RUNLEDGER_LOG_FORMAT", "json")
    pool = get_multiprocessing_logger()
    touched = [logging.getLogger(n) for n in ("", "ledger", "runs", "django", "celery")]
    touched += [logging.getLogger(n) for n in ("celery.task", "celery.redirected")] + [pool]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in touched]
    try:
        app.log.already_setup = False
        app.log.setup_logging_subsystem(loglevel=logging.INFO)
        assert pool.handlers, "Celery configured no handler for the pool logger"
        stream = io.StringIO()
        for handler in pool.handlers:
            handler.setStream(stream)  # type: ignore[attr-defined]
        pool.error("Process %r pid:%r exited with %r", "ForkPoolWorker-1", 1, "signal 15")
        (line,) = stream.getvalue().splitlines()
        record = json.loads(line)
        assert record["level"] == "ERROR" and "ForkPoolWorker-1" in record["message"]
    finally:
        for lg, handlers, level, propagate in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate
        app.log.already_setup = False
