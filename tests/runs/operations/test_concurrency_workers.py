"""Concurrency keys across real worker processes on PostgreSQL: runs of one key never execute
more than ``limit`` at once, whichever worker takes them (the overlap is read from the ledger's
execution rows, not from timing); a worker SIGKILLed holding the key's slot frees it with its
lease; every run finishes."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from ledger import api
from ledger.models import Execution, Run
from tests.support import paced_agents  # noqa: F401 - registers the agents in this process too

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 120  # seconds any condition may take on a loaded machine before the test fails


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {"RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.paced_agents"}
    # lost_after is long: a held-back run comes back because a slot was offered, not because
    # the sweep found it lost.
    with Cluster(tmp_path, lease_seconds=3.0, sweep_seconds=0.5, lost_after=3600, env=env) as c:
        yield c
    connection.close()


def _most_at_once(run_ids: list[str]) -> int:
    """The most executions of these runs open at one instant (from their claim to their end)."""
    edges: list[tuple[datetime, int]] = []
    for started, ended in Execution.objects.filter(run_id__in=run_ids).values_list(
        "started_at", "ended_at"
    ):
        assert ended is not None
        edges += [(started, 1), (ended, -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        now += step
        most = max(most, now)
    return most


def _all_succeeded(run_ids: list[str]) -> bool:
    return Run.objects.filter(pk__in=run_ids, status="succeeded").count() == len(run_ids)


def test_runs_of_one_key_never_execute_together_across_two_workers(cluster) -> None:
    cluster.worker("w1", concurrency=2)
    cluster.worker("w2", concurrency=2)  # four slots in the fleet, one for the key
    with cluster.producing():
        ids = [
            api.start_run("paced", {"customer": "cus_42", "seconds": 0.4, "n": i}).run_id
            for i in range(5)
        ]
        free = [api.start_run("paced-free", {"seconds": 0.4, "n": i}).run_id for i in range(3)]
    assert wait_for(lambda: _all_succeeded(ids + free), timeout=WAIT), cluster.log(
        "w1"
    ) + cluster.log("w2")
    assert _most_at_once(ids) == 1
    assert _most_at_once(free) > 1  # the runs without a key were not held apart
    # Runs of the key were executed by more than one process (each worker has two): the
    # limit held across processes, through the database.
    workers = set(Execution.objects.filter(run_id__in=ids).values_list("worker", flat=True))
    assert len(workers) >= 2, workers


def test_a_killed_worker_holding_the_slot_frees_it_with_its_lease(cluster, tmp_path) -> None:
    hold = tmp_path / "hold"
    hold.touch()  # the first run's step waits while this file exists
    doomed = cluster.worker("doomed", concurrency=1)
    with cluster.producing():
        first = api.start_run("paced", {"customer": "cus_9", "seconds": 0, "hold": str(hold)})
        first_id = first.run_id
    assert wait_for(lambda: Run.objects.get(pk=first_id).status == "running", timeout=WAIT), (
        cluster.log("doomed")
    )
    cluster.worker("w2", concurrency=2)
    cluster.beat()  # the sweep finds the dead worker's expired lease
    with cluster.producing():
        rest = [
            api.start_run("paced", {"customer": "cus_9", "seconds": 0.2, "n": i}).run_id
            for i in range(2)
        ]
    assert wait_for(
        lambda: Run.objects.filter(pk__in=rest, detail__startswith="waiting: 1 of 1").count() == 2,
        timeout=WAIT,
    ), cluster.log("w2")
    cluster.kill(doomed, signal.SIGKILL)
    hold.unlink()  # the first run, resumed, finishes at once
    assert wait_for(lambda: _all_succeeded([first_id, *rest]), timeout=WAIT), cluster.log("w2")
    assert _most_at_once([first_id, *rest]) == 1
    assert Execution.objects.filter(run_id=first_id, ending="crashed").exists()


def test_a_high_priority_run_started_behind_a_backlog_is_executed_first(cluster) -> None:
    with cluster.producing():  # the messages wait in the broker until the worker starts
        backlog = [api.start_run("paced-free", {"seconds": 0, "n": i}).run_id for i in range(30)]
        urgent = api.start_run("paced-free", {"seconds": 0}, priority=5).run_id
    cluster.worker("w1", concurrency=1)
    assert wait_for(lambda: _all_succeeded([urgent, *backlog]), timeout=WAIT), cluster.log("w1")
    order = list(
        Execution.objects.filter(run_id__in=[urgent, *backlog])
        .order_by("started_at")
        .values_list("run_id", flat=True)
    )
    assert order[0] == urgent
    assert len(order) == 31  # each run executed once: the outranked one was sent again, not lost
