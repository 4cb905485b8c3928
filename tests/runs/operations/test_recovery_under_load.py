"""Production under stress (issue 24, findings 1 to 3), with real `runledger worker` processes,
beat and PostgreSQL:

1. a worker host lost (SIGKILL of its process group) with hundreds of runs queued: its orphans
   are taken over while the backlog is still deep — the sweep does not wait behind the runs
   (before: the sweep shared their FIFO queue, expired there, and recovery took 323 s);
2. PostgreSQL stopped and started under queued and running runs: every run finishes, with the
   300 s re-queue rule turned off — the tasks that could not reach the database were sent again
   with back-off instead of acknowledged and forgotten;
3. a rolling deploy: the old worker drains on SIGTERM (its runs handed back at the next step
   boundary), the new release takes them over at once, and the runs the deploy stops are
   exactly those ``check_deploy`` predicted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from harness import recovery
from harness.cluster import Cluster, wait_for
from harness.servers import PostgresServer, postgres_bindir
from ledger import transitions
from ledger.models import Run, RunStatus, Step
from runs.operations.tasks import start_run
from tests.support import release_agents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 240  # seconds any condition may take on a loaded machine before the test fails
NEVER = "3600"  # the 300 s re-queue rule, out of the way: only the path under test recovers


def env(**extra: str) -> dict[str, str]:
    return {"RUNLEDGER_AGENT_MODULES": recovery.MODULES, **extra}


def test_a_host_lost_under_a_deep_queue_is_taken_over_before_the_backlog_drains(
    tmp_path: Path,
) -> None:
    runs = 240
    with Cluster(
        tmp_path, lease_seconds=5.0, sweep_seconds=1.0, lost_after=float(NEVER), env=env()
    ) as cluster:
        lost = recovery.lose_a_host_under_a_deep_queue(cluster, runs=runs, hold=1.0, timeout=WAIT)
        assert lost.orphans, "host a was executing runs when it died"
        assert lost.queued_at_kill >= runs - 10
        # Taken over within lease + sweep + a pick-up while ~200 runs still waited: neither the
        # sweep nor the orphans' resumes queued behind the backlog.
        assert lost.queued_at_takeover >= runs // 2, lost
        recovery.cancel_backlog(lost.run_ids, keep=lost.orphans)
        assert wait_for(lambda: recovery.all_final(lost.orphans), timeout=WAIT)
        for run in Run.objects.filter(pk__in=lost.orphans):
            assert (run.status, run.executions) == ("succeeded", 2), run.run_id
            assert run.lease_owner == ""
    connection.close()


@pytest.mark.skipif(postgres_bindir() is None, reason="no initdb/pg_ctl on this machine")
def test_every_run_finishes_after_a_database_restart_without_the_requeue_rule(
    tmp_path: Path,
) -> None:
    # Not under tmp_path: the server may run as the postgres user, who cannot enter it.
    server = PostgresServer(Path(tempfile.mkdtemp(prefix="runledger-pg-"))).start()
    workers = ("w1", "w2")
    try:
        with (
            recovery.default_database(server),
            Cluster(
                tmp_path / "cluster", lease_seconds=5.0, lost_after=float(NEVER), env=env()
            ) as cluster,
        ):
            cluster.beat()
            for name in workers:
                cluster.worker(name, concurrency=2)

            def retried() -> bool:
                return recovery.retries_logged(cluster, workers) >= 4

            restart = recovery.restart_database_under_runs(
                cluster,
                server,
                runs=40,
                hold=0.3,
                workers=workers,
                stay_down=lambda: wait_for(retried, timeout=WAIT),
                timeout=WAIT,
            )
            assert restart.queued_at_stop >= 20 and restart.running_at_stop >= 2
            found = recovery.statuses(restart.run_ids)
            assert set(found.values()) == {"succeeded"}, found
            assert restart.retries >= 4
    finally:
        server.remove()


# --- a rolling deploy -----------------------------------------------------------------------


def release_runs(tmp_path: Path) -> tuple[Path, list[Run]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    runs = [
        transitions.run_start(
            agent=release_agents.NAME, inputs={"changes": i % 2 == 0, "gate": str(gate)}
        )
        for i in range(6)
    ]
    return gate, runs


def check_deploy(cluster: Cluster, release: str) -> tuple[int, dict[str, bool]]:
    """``check_deploy --json`` under ``release``: its exit code and, per run, whether it blocks."""
    done = subprocess.run(
        [sys.executable, "manage.py", "check_deploy", "--json"],
        cwd=settings.BASE_DIR,
        env={**cluster.env, "RUNLEDGER_TEST_RELEASE": release},
        capture_output=True,
        text=True,
        timeout=120,
    )
    verdicts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, {v["run_id"]: v["blocks"] for v in verdicts}


def test_a_rolling_deploy_hands_runs_over_and_stops_only_what_check_deploy_predicted(
    tmp_path: Path,
) -> None:
    modules = f"ledger.examples.agents,{release_agents.__name__}"
    with Cluster(
        tmp_path / "cluster",
        lease_seconds=5.0,
        lost_after=float(NEVER),
        env={"RUNLEDGER_AGENT_MODULES": modules},
    ) as cluster:
        cluster.beat()
        old = cluster.runledger_worker("old", concurrency=4, env={"RUNLEDGER_TEST_RELEASE": "1"})
        gate, runs = release_runs(tmp_path)
        for run in runs:
            cluster.send(start_run, run.run_id)
        asked = Step.objects.filter(run__in=runs, step_id="ask", status="succeeded")
        assert wait_for(lambda: asked.count() == 4, timeout=WAIT), cluster.log("old")
        started = set(asked.values_list("run_id", flat=True))

        # Before the deploy: what would the new release do to the runs in flight?
        code, blocks = check_deploy(cluster, release="2")
        predicted = {run_id for run_id, b in blocks.items() if b}
        changed = {r.run_id for r in runs if r.inputs["changes"]}
        assert predicted == started & changed and code == 1, blocks
        assert set(blocks) == {r.run_id for r in runs}  # the queued ones are judged too

        # The deploy: the new release starts, the old one gets SIGTERM (its main process only,
        # as systemd's KillMode=mixed does) while every one of its runs is inside a step.
        new = cluster.runledger_worker("new", concurrency=4, env={"RUNLEDGER_TEST_RELEASE": "2"})
        os.kill(old.pid, signal.SIGTERM)
        told = "its run is handed back at its next step"
        assert wait_for(lambda: cluster.log("old", tail=10_000).count(told) == 4, timeout=WAIT), (
            cluster.log("old")
        )
        (gate / "open").touch()  # the steps in flight end; the next step boundary hands back
        assert old.wait(timeout=WAIT) == 0, cluster.log("old")
        assert wait_for(lambda: recovery.all_final([r.run_id for r in runs]), timeout=WAIT), (
            cluster.log("new")
        )
        assert new.poll() is None

        stopped = set()
        for run in Run.objects.filter(pk__in=[r.run_id for r in runs]):
            steps = dict(Step.objects.filter(run=run).values_list("step_id", "attempt"))
            if run.run_id in started:
                assert run.executions == 2, run.run_id  # handed back, taken by the new release
                assert steps["wait"] == 1  # the step in flight finished once, on the old code
            else:
                assert run.executions == 1  # queued during the deploy: only the new release
            if run.status != RunStatus.SUCCEEDED:
                assert (run.status, run.reason, run.blocked_step_id) == (
                    "needs_attention",
                    "stale",
                    "ask",
                ), run.run_id
                stopped.add(run.run_id)
        assert stopped == predicted  # no run stopped by the deploy that the check did not name
        handed = cluster.log("old", tail=10_000).count("handed back before step after")
        assert handed == 4, cluster.log("old")


def test_the_sweep_and_deliveries_go_to_the_control_queue_and_never_expire() -> None:
    from runs import cli

    for task in ("runledger.sweep", "runledger.notifications"):
        assert settings.CELERY_TASK_ROUTES[task] == {"queue": settings.RUNLEDGER_CONTROL_QUEUE}
    assert all("expires" not in str(e) for e in settings.CELERY_BEAT_SCHEDULE.values())
    assert cli._take_only(["--only", "control", "-l", "info"]) == ("control", ["-l", "info"])
    assert cli._take_only(["--only=runs"]) == ("runs", [])
    assert cli._control_args(["-n", "w1@%h", "-c", "8", "--loglevel=INFO"]) == [
        "--loglevel=INFO",
        "-n",
        "control.w1@%h",
    ]
