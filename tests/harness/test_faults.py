"""Faults beyond SIGKILL, on real Celery workers (issue 14, item 4).

* the workers' PostgreSQL connection cut by a proxy just before, during and just after each
  commit of each effect step (and at random moments);
* PostgreSQL restarted under running runs (a private server this test starts), and Redis
  restarted under queued runs (a private redis-server, never the shared one);
* a step write refused by the database — a full disk (SQLSTATE 53100, raised by a trigger: the
  stand-in for a tablespace on a full filesystem) or a statement timeout — on an effect's intent
  and on its result.

Every test waits on conditions with generous timeouts, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from harness import killtest
from harness.cluster import Cluster, database_url, wait_for
from harness.recovery import all_final, default_database, statuses
from harness.servers import PostgresServer, RedisServer, postgres_bindir
from ledger import transitions
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import Run, RunStatus, Step, StepStatus
from runs.operations.tasks import resume_run, start_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def _report_failures(report: killtest.Report, seed: int) -> str:
    return f"seed={seed}\n" + "\n".join(
        f"{t.describe()}\n  " + "\n  ".join(t.problems) for t in report.failures
    )


# --- connection cuts ------------------------------------------------------------------------


def test_a_cut_database_connection_at_every_commit_of_every_effect_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    """Before (not committed), during (committed, the answer lost) and after (committed and
    answered) each effect's intent and result write: the run recovers through the sweep with
    the uninterrupted result, each effect happened exactly once (or, for the notifier with no
    read path, the run waits for a person and the notification is not repeated)."""
    seed = random.SystemRandom().randrange(1_000_000)
    fixed = [t for t in killtest.plan(200, seed, ("cut",)) if t.mode == "cut"]
    chosen = fixed[: sum(len(killtest.commit_points(s)) for s in killtest.SCENARIOS)]
    assert {(t.scenario.name, t.point) for t in chosen} == {
        (s.name, p) for s in killtest.SCENARIOS for p in killtest.commit_points(s)
    }
    report = killtest.run(trials=len(chosen), seed=seed, root=tmp_path, chosen=chosen)
    connection.close()
    print(report.recovery_line())
    print(report.summary_line())
    assert not report.failures, _report_failures(report, seed)
    assert report.faulted("cut") == len(chosen)
    # Cut during the notifier's intent, or before its result: nobody can know; a person settles.
    assert report.count("blocked") >= 2


# --- PostgreSQL restarted ------------------------------------------------------------------


def _assert_finished_or_stopped_with_a_reason(run_ids: list[str]) -> None:
    for run in Run.objects.filter(pk__in=run_ids):
        assert run.status == RunStatus.SUCCEEDED or (
            run.status == RunStatus.NEEDS_ATTENTION and run.reason
        ), f"{run.run_id}: {run.status} {run.reason} {run.detail} {run.error}"
        emails = OutboxMessage.objects.filter(message_id__startswith=f"{run.run_id}:").count()
        assert emails == 1 if run.status == RunStatus.SUCCEEDED else emails <= 1, run.run_id


@pytest.mark.skipif(postgres_bindir() is None, reason="no initdb/pg_ctl on this machine")
def test_runs_survive_a_postgresql_restart_under_them(tmp_path: Path) -> None:
    """A private PostgreSQL is restarted (immediate: as a crash) while surveys run on two
    workers: every run ends succeeded (or stopped with a reason), none waits forever, and
    no email is sent twice."""
    # Not under tmp_path: the server may run as the postgres user, who cannot enter it.
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="runledger-pg-"))).start()
    try:
        with default_database(server), Cluster(tmp_path / "cluster", lost_after=5.0) as cluster:
            cluster.beat()
            cluster.worker("w1", concurrency=2)
            cluster.worker("w2", concurrency=2)
            run_ids = []
            for _ in range(6):
                run = transitions.run_start(agent="survey", inputs={"records": 60, "delay_ms": 40})
                run_ids.append(run.run_id)
                cluster.send(start_run, run.run_id)
            running = wait_for(
                lambda: sum(1 for s in statuses(run_ids).values() if s == "running") >= 3,
                timeout=120,
            )
            assert running, f"the runs never started: {cluster.log('w1')}"
            connection.close()
            server.restart()
            assert wait_for(lambda: all_final(run_ids), timeout=240, interval=0.2), (
                f"{statuses(run_ids)}\n{cluster.log('w1')}\n{cluster.log('beat')}"
            )
            _assert_finished_or_stopped_with_a_reason(run_ids)
            assert Run.objects.filter(pk__in=run_ids, executions__gt=1).exists()
    finally:
        server.remove()


# --- Redis restarted ----------------------------------------------------------------------


def test_queued_runs_survive_a_redis_restart(tmp_path: Path) -> None:
    """Runs queued on a private Redis that restarts without persistence (every message lost):
    the workers reconnect, the sweep enqueues the lost runs again, every run finishes."""
    redis = RedisServer(tmp_path / "redis").start()
    try:
        with Cluster(tmp_path / "cluster", broker_url=redis.url, lost_after=3.0) as cluster:
            cluster.beat()
            cluster.worker("w1", concurrency=1)
            run_ids = []
            for _ in range(6):
                run = transitions.run_start(agent="survey", inputs={"records": 20, "delay_ms": 20})
                run_ids.append(run.run_id)
                cluster.send(start_run, run.run_id)
            assert wait_for(lambda: "running" in statuses(run_ids).values(), timeout=120)
            redis.restart()
            assert wait_for(lambda: all_final(run_ids), timeout=180, interval=0.2), (
                f"{statuses(run_ids)}\n{cluster.log('w1')}\n{cluster.log('beat')}"
            )
            found = statuses(run_ids)
            assert set(found.values()) == {"succeeded"}, found
            # The worker did lose its broker and came back (the restart was real).
            assert "Connection to broker lost" in cluster.log("w1", tail=5000)
            _assert_finished_or_stopped_with_a_reason(run_ids)
    finally:
        redis.stop()


# --- a step write refused: full disk, statement timeout -------------------------------------

_TRIGGER = """
CREATE TABLE IF NOT EXISTS faults_plan (run_id text, step_id text, status text, action text);
CREATE OR REPLACE FUNCTION faults_refuse() RETURNS trigger AS $$
DECLARE wanted text;
BEGIN
    SELECT action INTO wanted FROM faults_plan
    WHERE run_id = NEW.run_id AND step_id = NEW.step_id AND status = NEW.status;
    IF wanted = 'disk_full' THEN
        RAISE EXCEPTION 'could not extend file: No space left on device'
            USING ERRCODE = 'disk_full';
    ELSIF wanted = 'timeout' THEN
        PERFORM pg_sleep(120);
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER faults_refuse BEFORE INSERT OR UPDATE ON ledger_step
    FOR EACH ROW EXECUTE FUNCTION faults_refuse();
"""
_UNDO = "DROP TRIGGER IF EXISTS faults_refuse ON ledger_step; DROP TABLE IF EXISTS faults_plan;"

CASES = [  # (action, the writes that may be refused, the status written, charges after it)
    ("disk_full", ("intent",), StepStatus.STARTED, 0),
    ("disk_full", ("result",), StepStatus.SUCCEEDED, 1),
    ("timeout", ("intent",), StepStatus.STARTED, 0),
    # A step write holds the run row FOR SHARE; on a slow machine the statement's wait can
    # outlast the lease, the worker is fenced, and the resume's reconcile writes the same row
    # (settlement) and is refused the same way. Both say the effect happened once.
    ("timeout", ("result", "settlement"), StepStatus.SUCCEEDED, 1),
]
WHY = {"disk_full": "SQLSTATE 53100", "timeout": "SQLSTATE 57014"}


@contextlib.contextmanager
def _refusing(plan: list[tuple[str, str, str, str]]) -> Iterator[None]:
    with connection.cursor() as cur:
        cur.execute(_TRIGGER)
        for row in plan:
            cur.execute("INSERT INTO faults_plan VALUES (%s, %s, %s, %s)", list(row))
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute(_UNDO)


def _with_statement_timeout(url: str, ms: int) -> str:
    return f"{url}?options={quote(f'-c statement_timeout={ms}')}"


def test_a_refused_step_write_fails_the_run_with_the_reason_and_never_repeats_the_effect(
    tmp_path: Path,
) -> None:
    """A full disk or a statement timeout on the refund's intent write (nothing sent) or on its
    result write (sent once): the run fails and its error names the SQLSTATE and what a retry
    does; after the database is fixed, an operator's retry finishes the run with one charge."""
    runs = {case: transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
            for case in CASES}  # fmt: skip
    plan = [(run.run_id, "refund", str(status), action)
            for (action, _, status, _), run in runs.items()]  # fmt: skip
    env = {"DATABASE_URL": _with_statement_timeout(database_url(), 3000)}
    # The lease outlasts the statement timeout (3 s), as it must in production too.
    with Cluster(tmp_path, env=env, lease_seconds=10) as cluster, _refusing(plan):
        cluster.beat()
        cluster.worker("w1", concurrency=2)
        for run in runs.values():
            cluster.send(start_run, run.run_id)
        ids = [run.run_id for run in runs.values()]
        assert wait_for(lambda: all_final(ids), timeout=120, interval=0.1), cluster.log("w1")
        for (action, write, _, charges), run in runs.items():
            run.refresh_from_db()
            assert run.status == RunStatus.FAILED, (action, write, run.status, run.detail)
            assert WHY[action] in run.error, run.error
            assert any(f"({what})" in run.error for what in write), run.error
            assert "retry" in run.error
            got = ProviderCharge.objects.filter(idempotency_key__startswith=run.run_id).count()
            assert got == charges, (action, write, got)
    # The database is fixed (trigger gone): a person retries; the charge is not sent again.
    with Cluster(tmp_path / "after") as cluster:
        cluster.worker("w1", concurrency=2)
        for run in runs.values():
            transitions.run_retry(run_id=run.run_id, by="tester", reason="disk freed",
                                  seen_version=None)  # fmt: skip
            cluster.send(resume_run, run.run_id)
        ids = [run.run_id for run in runs.values()]
        assert wait_for(lambda: all_final(ids), timeout=120, interval=0.1), cluster.log("w1")
        for run in runs.values():
            run.refresh_from_db()
            assert run.status == RunStatus.SUCCEEDED, (run.status, run.detail, run.error)
            assert (
                ProviderCharge.objects.filter(idempotency_key__startswith=run.run_id).count() == 1
            )
            step = Step.objects.get(run_id=run.run_id, step_id="refund")
            assert step.status == StepStatus.SUCCEEDED
