"""Faults beyond SIGKILL, on real Celery workers (issue 14, item 4): PostgreSQL restarted under
running runs (a private server this test starts), and Redis restarted under queued runs (a
private redis-server, never the shared one). The connection cuts are in test_faults.py.

Every test waits on conditions with generous timeouts, never a fixed sleep.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from harness.recovery import all_final, default_database, statuses
from harness.servers import PostgresServer, RedisServer, postgres_bindir
from ledger import transitions
from ledger.examples.models import OutboxMessage
from ledger.models import Run, RunStatus
from runs.operations.tasks import start_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


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
