"""Hundreds of runs in flight in one worker process, lost or frozen (issue 31), on real
``runledger worker --runs-in-flight`` processes and PostgreSQL, sync and async agents mixed:

1. one worker process holds 200 runs, every one inside its payment (half before sending, half
   after the provider received it); its whole process group is SIGKILLed. Every run is
   recovered by another worker, each payment reaches the provider exactly once (sent again only
   where the lookup says it never arrived), and every result equals an uninterrupted run's;
2. a worker holding 60 runs is SIGSTOPped inside a read before their payments; another worker
   takes them over and finishes them; then the frozen one wakes (SIGCONT) and sends nothing:
   it can no longer prove its lease (fencing).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from harness import recovery
from harness.cluster import Cluster, wait_for
from harness.unannounced import start_unannounced
from ledger.models import Run, Step
from runs.operations.tasks import start_run
from tests.support import inflight_agents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 300  # seconds any condition may take on a loaded machine before the test fails
MODULES = f"ledger.examples.agents,{inflight_agents.__name__}"
#: How a worker holding many runs is started (docs/platform/workers.md).
RUNS_IN_FLIGHT = 250


def _cluster(folder: Path) -> Cluster:
    folder.mkdir()
    return Cluster(
        folder / "cluster",
        lease_seconds=5.0,
        sweep_seconds=1.0,
        lost_after=3600.0,
        env={"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_TEST_INFLIGHT_DIR": str(folder)},
    )


def _start(cluster: Cluster, phases: list[str]) -> list[str]:
    """One run per phase, sync and async agents alternating."""
    ids = []
    for i, phase in enumerate(phases):
        agent = inflight_agents.ASYNC_NAME if (i // 2) % 2 else inflight_agents.NAME
        run = start_unannounced(agent=agent, inputs={"run": f"r{i:03d}", "phase": phase})
        cluster.send(start_run, run.run_id)
        ids.append(run.run_id)
    return ids


def _markers(folder: Path, prefix: str) -> int:
    return sum(1 for _ in folder.glob(f"{prefix}.*"))


def _assert_each_paid_once_with_the_uninterrupted_result(folder: Path, run_ids: list[str]) -> None:
    sent = Counter(inflight_agents.sent_keys(folder))
    keys = dict(
        Step.objects.filter(run_id__in=run_ids, step_id="pay").values_list("run_id", "effect_key")
    )
    assert len(keys) == len(run_ids)
    assert {key: sent[key] for key in keys.values()} == {key: 1 for key in keys.values()}
    assert sum(sent.values()) == len(run_ids)  # nothing sent under any other key
    for run in Run.objects.filter(pk__in=run_ids):
        assert run.status == "succeeded", (run.run_id, run.status, run.reason)
        assert run.result == {
            **inflight_agents.expected(run.inputs["run"]),
            "paid": keys[run.run_id],
        }


def test_a_worker_killed_with_200_runs_inside_effects_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "provider"
    with _cluster(folder) as cluster:
        victim = cluster.runledger_worker("victim", runs_in_flight=RUNS_IN_FLIGHT)
        run_ids = _start(cluster, ["before", "after"] * 100)
        inside = lambda: _markers(folder, "entered") == len(run_ids)  # noqa: E731
        assert wait_for(inside, timeout=WAIT, interval=0.2), cluster.log("victim")
        assert _markers(folder, "entered") == 200
        sent_before_kill = len(inflight_agents.sent_keys(folder))
        assert sent_before_kill == 100  # the "after" half reached the provider, the rest not

        Cluster.kill(victim)
        victim.wait(timeout=60)
        (folder / "gate").touch()
        cluster.beat()
        cluster.runledger_worker("rescuer", runs_in_flight=RUNS_IN_FLIGHT)
        assert wait_for(lambda: recovery.all_final(run_ids), timeout=WAIT, interval=0.5), (
            cluster.log("rescuer")
        )
        _assert_each_paid_once_with_the_uninterrupted_result(folder, run_ids)
        assert set(Run.objects.filter(pk__in=run_ids).values_list("executions", flat=True)) == {2}
    connection.close()


def test_a_frozen_worker_woken_after_a_takeover_sends_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "provider"
    with _cluster(folder) as cluster:
        frozen = cluster.runledger_worker("frozen", runs_in_flight=RUNS_IN_FLIGHT)
        run_ids = _start(cluster, ["read"] * 60)
        reading = lambda: _markers(folder, "reading") == len(run_ids)  # noqa: E731
        assert wait_for(reading, timeout=WAIT, interval=0.2), cluster.log("frozen")
        os.killpg(frozen.pid, signal.SIGSTOP)
        try:
            cluster.beat()
            cluster.runledger_worker("rescuer", runs_in_flight=RUNS_IN_FLIGHT)
            taken = Run.objects.filter(pk__in=run_ids, executions__gte=2)
            assert wait_for(lambda: taken.count() == len(run_ids), timeout=WAIT, interval=0.5)
            (folder / "gate").touch()
            assert wait_for(lambda: recovery.all_final(run_ids), timeout=WAIT, interval=0.5), (
                cluster.log("rescuer")
            )
        finally:
            os.killpg(frozen.pid, signal.SIGCONT)
        # The woken worker's reads return; it must find its lease gone and send nothing.
        lost = "lease"
        assert wait_for(
            lambda: cluster.log("frozen", tail=100_000).count(lost) >= 1, timeout=WAIT
        ), cluster.log("frozen")
        _assert_each_paid_once_with_the_uninterrupted_result(folder, run_ids)
    connection.close()
