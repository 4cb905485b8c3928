"""Faults beyond SIGKILL, on real Celery workers (issue 14, item 4): a step write refused by the
database — a full disk (SQLSTATE 53100, raised by a trigger: the stand-in for a tablespace on a
full filesystem) or a statement timeout — on an effect's intent and on its result. The
connection cuts are in test_faults.py.

Every test waits on conditions with generous timeouts, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from harness.cluster import Cluster, database_url, wait_for
from harness.recovery import all_final
from ledger import transitions
from ledger.examples.models import ProviderCharge
from ledger.models import RunStatus, Step, StepStatus
from runs.operations.tasks import resume_run, start_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


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
