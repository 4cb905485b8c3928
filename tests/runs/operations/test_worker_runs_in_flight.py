"""``runledger worker --runs-in-flight N``: one process holds N waiting runs on threads, on no more
PostgreSQL sessions than its pool and its control process's pool; told SIGTERM it drains (each
run handed back at its next step boundary) and exits; the prefork mode finishes the runs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.db import connection

from harness.cluster import Cluster, database_url, wait_for
from ledger import transitions
from ledger.models import Run, Step
from runs.operations.tasks import start_run
from tests.support import waiting_agents  # noqa: F401 - registers the agent here too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
RUNS = 60
POOL = 3
WAIT = 240


APP = "runledger-runs-in-flight"


def _sessions() -> int:
    """The worker's sessions (its runs' process and its control process, named ``APP``)."""
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP])
        return int(cur.fetchone()[0])


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_threads_worker_holds_many_runs_on_its_pool_and_drains_them_on_sigterm(
    tmp_path: Path,
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        "RUNLEDGER_AGENT_MODULES": "tests.support.waiting_agents",
        "RUNLEDGER_TEST_WAIT_DIR": str(gate),
        "RUNLEDGER_DB_POOL_SIZE": str(POOL),
        "DATABASE_URL": f"{database_url()}?application_name={APP}",
    }
    with Cluster(tmp_path / "cluster", lease_seconds=6.0, lost_after=3600.0, env=env) as cluster:
        worker = cluster.runledger_worker("many", runs_in_flight=RUNS)
        ids = [
            transitions.run_start(agent="wait-for-gate", inputs={"n": i}).run_id
            for i in range(RUNS)
        ]
        for run_id in ids:
            cluster.send(start_run, run_id)
        peak = 0

        def all_inside() -> bool:
            nonlocal peak
            peak = max(peak, _sessions())
            return _lines(gate / "inside") == RUNS

        assert wait_for(all_inside, timeout=WAIT, interval=0.2), cluster.log("many")
        # Longer than a lease: the renewer keeps all of them (none is taken by the sweep).
        renewed = Run.objects.filter(pk__in=ids).values_list("heartbeat_at", flat=True)
        first = max(renewed)
        assert wait_for(lambda: min(renewed.all()) > first, timeout=WAIT, interval=0.2)
        peak = max(peak, _sessions())
        assert Run.objects.filter(pk__in=ids, status="running").count() == RUNS
        # The runs' process and the control process: a pool each, whatever the runs, and the
        # runs' process's one LISTEN connection (a cancel is heard on it at once).
        assert 0 < peak <= 2 * POOL + 1, f"{peak} sessions for two pools of {POOL} + LISTEN"

        os.kill(worker.pid, signal.SIGTERM)  # a deploy: drain
        (gate / "go").touch()  # the steps in flight finish; the next ones are handed back
        assert wait_for(lambda: worker.poll() is not None, timeout=WAIT), cluster.log("many")
        statuses = set(Run.objects.filter(pk__in=ids).values_list("status", flat=True))
        assert statuses == {"queued"}, cluster.log("many")
        assert (
            Step.objects.filter(run_id__in=ids, step_id="think", status="succeeded").count() == RUNS
        )
        assert not Step.objects.filter(run_id__in=ids, step_id="after").exists()

        cluster.runledger_worker("prefork", concurrency=2)  # the old mode takes them over

        def finished() -> bool:
            return Run.objects.filter(pk__in=ids, status="succeeded").count() == RUNS

        assert wait_for(finished, timeout=WAIT, interval=0.2), cluster.log("prefork")
    results = sorted(Run.objects.filter(pk__in=ids).values_list("result", flat=True))
    assert results == sorted(i * 2 + 1 for i in range(RUNS))
    assert _lines(gate / "inside") == RUNS  # handed back after "think": it never ran again
