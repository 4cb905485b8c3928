"""Real Celery worker and beat processes against the test database: duplicates, races, faults.

Every test here starts `celery -A runs worker` (and beat) as subprocesses with a broker of its
own, and asserts the ledger and the simulators' tables after the act.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from harness.cluster import Cluster, wait_for
from ledger import registry, transitions
from ledger.agents import agent
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import Run, Step
from runs.operations.tasks import resume_run, start_run
from tests.support import probe_agents
from tests.support.processes import redis_reachable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

MODULES = "ledger.examples.agents,tests.support.probe_agents"
LEASE = 5.0
WAIT = 120  # seconds any condition may take on a loaded machine before the test fails


def cluster_env(**extra: str) -> dict[str, str]:
    return {"RUNLEDGER_AGENT_MODULES": MODULES, "PYTHONPATH": str(settings.BASE_DIR), **extra}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # A 5 s lease renewed every third of it: a worker starved of CPU for a few seconds on a
    # busy machine keeps its lease, so these tests see takeovers only where they cause them.
    with Cluster(
        tmp_path, lease_seconds=LEASE, sweep_seconds=0.5, lost_after=2, env=cluster_env()
    ) as c:
        yield c
    connection.close()


def status(run_id: str) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run_id)


def finished(run_id: str) -> bool:
    return status(run_id) in ("succeeded", "failed", "needs_attention", "cancelled")


def probe_run(tmp_path: Path, hold: float | None, name: str = "probe") -> Run:
    gate = tmp_path / f"gate-{uuid.uuid4().hex[:8]}"
    gate.mkdir()
    inputs = {"log": str(tmp_path / f"{name}.log"), "gate": str(gate), "hold": hold}
    return transitions.run_start(agent="probe", inputs=inputs)


def test_a_run_started_from_the_command_runs_on_a_worker_after_the_commit(cluster) -> None:
    cluster.worker("w1")
    out = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "start_run",
            "refund",
            "--inputs",
            '{"invoice_id": "inv_1001"}',
        ],
        cwd=settings.BASE_DIR,
        env=cluster.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    run_id = out.split()[1].rstrip(":")
    assert out.strip().endswith("queued for a worker")
    assert wait_for(lambda: finished(run_id), timeout=WAIT), cluster.log("w1")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 1, 0)
    assert ProviderCharge.objects.count() == OutboxMessage.objects.count() == 1
    assert Notification.objects.count() == 1


def test_a_lost_start_message_is_sent_again_by_the_sweep(cluster) -> None:
    cluster.worker("w1")
    cluster.beat()
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    cluster.send(start_run, run.run_id, queue="a-queue-nobody-reads")
    assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("w1")
    run.refresh_from_db()
    assert (run.status, run.executions) == ("succeeded", 1)
    assert ProviderCharge.objects.count() == 1


def test_duplicate_resume_tasks_across_workers_execute_each_run_once(cluster, tmp_path) -> None:
    for name in ("w1", "w2", "w3"):
        cluster.worker(name, concurrency=2)
    seed = random.SystemRandom().randrange(1_000_000)
    rng = random.Random(seed)
    runs = [probe_run(tmp_path, hold=0.4) for _ in range(5)]
    copies = {run.run_id: rng.randint(2, 10) for run in runs}
    sends = [run_id for run_id, n in copies.items() for _ in range(n)]
    rng.shuffle(sends)
    for run_id in sends:
        cluster.send(resume_run, run_id)
    assert wait_for(lambda: all(finished(r.run_id) for r in runs), timeout=WAIT), f"seed={seed}"

    def logs() -> str:
        return "".join(cluster.log(w, tail=100_000) for w in ("w1", "w2", "w3"))

    # Copies still queued when the runs finished are consumed (and do nothing) afterwards.
    def consumed() -> int:
        return len(re.findall(r"Task runledger\.resume_run\[\S+\] succeeded", logs()))

    assert wait_for(lambda: consumed() == len(sends), timeout=WAIT), (seed, consumed(), len(sends))
    executions = probe_agents.executions(tmp_path / "probe.log")
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.executions, run.resume_count) == ("succeeded", 1, 0), seed
        assert len(executions[run.run_id]) == 1, (seed, executions[run.run_id])
        assert OutboxMessage.objects.filter(message_id__startswith=run.run_id).count() == 1
        # Every other copy found the lease held, or the run finished, and did nothing.
        refused = logs().count(f"resume of run {run.run_id}: nothing recorded by this worker")
        assert refused == copies[run.run_id] - 1, (seed, copies)


def test_a_run_longer_than_its_lease_keeps_it_by_heartbeat(cluster, tmp_path) -> None:
    cluster.worker("w1")
    cluster.worker("w2")
    cluster.beat()
    run = probe_run(tmp_path, hold=2.5 * LEASE)  # 2.5 leases long, the sweep every 0.5 s
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("w1")
    run.refresh_from_db()
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 1, 0)
    [(pid, _, exited)] = probe_agents.executions(tmp_path / "probe.log")[run.run_id]
    assert pid == run.result["hold_pid"] and exited is not None


def freeze_in_hold(cluster: Cluster, tmp_path: Path) -> tuple[Run, Any, int]:
    """Start a probe run on worker A and SIGSTOP A (parent and child) inside the held step,
    which holds until released: the freeze never races the hold's end. The release is given
    at once; A sees it when it wakes."""
    victim = cluster.worker("a")
    run = probe_run(tmp_path, hold=None)
    cluster.send(start_run, run.run_id)
    gate = Path(run.inputs["gate"]) / "first"
    assert wait_for(lambda: gate.exists() and gate.read_text(), timeout=WAIT), cluster.log("a")
    holder = int(gate.read_text())
    Cluster.kill(victim, signal.SIGSTOP)
    assert wait_for(lambda: _stopped(holder), timeout=WAIT)  # really stopped, then released
    (Path(run.inputs["gate"]) / "release").touch()
    return run, victim, holder


def _stopped(pid: int) -> bool:
    """The process is stopped by a signal (state T in /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def ledger_state(run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = Run.objects.values().get(pk=run_id)
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq").values())
    return run, steps


def test_a_frozen_worker_that_wakes_after_another_finished_writes_nothing(
    cluster, tmp_path
) -> None:
    run, victim, frozen_pid = freeze_in_hold(cluster, tmp_path)
    cluster.worker("b")
    cluster.beat()
    assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("b")
    before = ledger_state(run.run_id)
    assert before[0]["status"] == "succeeded"
    assert before[0]["result"]["hold_pid"] != frozen_pid

    Cluster.kill(victim, signal.SIGCONT)
    assert wait_for(lambda: "lost its lease" in cluster.log("a"), timeout=WAIT), cluster.log("a")
    assert ledger_state(run.run_id) == before
    assert all(step["result"].get("pid") != frozen_pid for step in before[1] if step["result"])
    assert OutboxMessage.objects.filter(message_id__startswith=run.run_id).count() == 1
    # Two executions of the body: the frozen one, whose every write after waking was refused,
    # and the one live executor that finished the run after the sweep took the lease back.
    lives = probe_agents.executions(tmp_path / "probe.log")[run.run_id]
    assert sorted(pid == frozen_pid for pid, _, _ in lives) == [False, True]
    assert (before[0]["executions"], before[0]["resume_count"]) == (2, 1)


def test_a_cancelled_run_stays_cancelled_when_its_frozen_worker_wakes(cluster, tmp_path) -> None:
    run, victim, _ = freeze_in_hold(cluster, tmp_path)
    transitions.run_cancel(by="test", reason="cancel", seen_version=None, run_id=run.run_id)
    before = ledger_state(run.run_id)
    Cluster.kill(victim, signal.SIGCONT)

    def stopped() -> bool:  # its next write refused, or the cancel heard first (LISTEN)
        log = cluster.log("a")
        return "lost its lease" in log or "cancelled while it executed" in log

    assert wait_for(stopped, timeout=WAIT), cluster.log("a")
    assert ledger_state(run.run_id) == before
    assert before[0]["status"] == "cancelled"
    assert not OutboxMessage.objects.exists()


def test_a_worker_whose_agent_module_fails_to_import_leaves_the_runs_it_lacks_queued(
    tmp_path: Path,
) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "fragile_agents.py").write_text("import a_vendor_sdk_that_is_not_installed\n")

    @agent("fragile")
    def fragile(ctx: Any, inputs: Any) -> None: ...

    @agent("retired")
    def retired(ctx: Any, inputs: Any) -> None: ...

    try:
        broken = transitions.run_start(agent="fragile", inputs={})
        gone = transitions.run_start(agent="retired", inputs={})
    finally:
        registry.unregister_agent("fragile")
        registry.unregister_agent("retired")
    path = os.pathsep.join([str(settings.BASE_DIR), str(modules)])
    env = cluster_env(
        PYTHONPATH=path, RUNLEDGER_AGENT_MODULES="ledger.examples.agents,fragile_agents"
    )
    with Cluster(tmp_path / "cluster", env=env) as cluster:
        worker = cluster.worker("w1")
        for run in (broken, gone):
            cluster.send(start_run, run.run_id)

        def not_taken() -> bool:
            log = cluster.log("w1", tail=100_000)
            return all(f"run {r.run_id}: not taken" in log for r in (broken, gone))

        assert wait_for(not_taken, timeout=WAIT), cluster.log("w1")
        ok = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
        cluster.send(start_run, ok.run_id)
        assert wait_for(lambda: finished(ok.run_id), timeout=WAIT), cluster.log("w1")
        assert worker.poll() is None
        log = cluster.log("w1", tail=100_000)
    # Neither run was claimed, blocked or failed: with a module that failed to import, the worker
    # cannot tell which agents it lacks for that reason, so it takes none it lacks (issue 19).
    for run in (broken, gone):
        run.refresh_from_db()
        assert (run.status, run.reason, run.executions) == ("queued", "", 0)
    assert "agent module fragile_agents failed to import" in log
    assert "a_vendor_sdk_that_is_not_installed" in log
    assert status(ok.run_id) == "succeeded"
    connection.close()


@pytest.mark.skipif(not redis_reachable(), reason="needs Redis on 127.0.0.1:6379")
def test_on_redis_a_whole_worker_killed_mid_effect_is_recovered_by_the_sweep(tmp_path) -> None:
    queue = f"runledger-test-{uuid.uuid4().hex[:10]}"
    env = cluster_env(RUNLEDGER_QUEUE=queue)
    with Cluster(
        tmp_path, lease_seconds=2, sweep_seconds=0.5, broker_url="redis://127.0.0.1:6379/0", env=env
    ) as cluster:
        run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
        victim = cluster.worker(
            "victim",
            env={"RUNLEDGER_KILL_AT": "charge.after_effect", "RUNLEDGER_KILL_SCOPE": "group"},
        )
        cluster.send(start_run, run.run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=WAIT), cluster.log("victim")
        assert ProviderCharge.objects.count() == 1 and status(run.run_id) == "running"
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("rescuer")
    run.refresh_from_db()
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1)
    assert ProviderCharge.objects.count() == OutboxMessage.objects.count() == 1
    assert Notification.objects.count() == 1
    connection.close()
