"""Retries with real Celery workers on PostgreSQL: a back-off longer than a worker may wait
holding a run releases it (the worker takes other runs meanwhile) and the run comes back when
its retry is due; a release whose countdown message is lost is recovered by the sweep."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from ledger import selectors, signals, transitions
from ledger.models import Run, Step
from ledger.processes.execute import run_execute
from tests.support import retry_agents  # noqa: F401 - registers the agents in this process too

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 120  # seconds any condition may take on a loaded machine before the test fails
SLEEP_MAX = "0.5"  # a retry due later than this releases the run


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.retry_agents",
        "RUNLEDGER_RETRY_SLEEP_MAX_SECONDS": SLEEP_MAX,
    }
    with Cluster(tmp_path, lease_seconds=5.0, sweep_seconds=0.5, lost_after=1, env=env) as c:
        yield c
    connection.close()


def run_row(run_id: str) -> Run:
    return Run.objects.get(pk=run_id)


def limited(tmp_path: Path, retry_after: float) -> dict[str, Any]:
    return {"counter": str(tmp_path / "attempts"), "fails": 1, "retry_after": retry_after}


def the_step(run_id: str) -> Step:
    return Step.objects.get(run_id=run_id, step_id="limited")


def test_a_long_back_off_frees_the_worker_and_the_run_comes_back(cluster, tmp_path) -> None:
    cluster.worker("w1", concurrency=1)  # one execution at a time
    with cluster.producing():
        waiting = transitions.run_start(agent="retry-later", inputs=limited(tmp_path, 4.0))
    assert wait_for(lambda: run_row(waiting.run_id).wake_at is not None, timeout=WAIT), cluster.log(
        "w1"
    )
    released = run_row(waiting.run_id)
    assert (released.status, released.lease_token, released.lease_owner) == ("queued", None, "")
    wake_at = released.wake_at
    assert wake_at is not None

    # While the first run waits out its back-off, the only worker slot executes another.
    with cluster.producing():
        other = transitions.run_start(agent="retry-quick", inputs={"n": 1})
    assert wait_for(lambda: run_row(other.run_id).status == "succeeded", timeout=WAIT)
    if run_row(waiting.run_id).status == "queued":  # not yet due: it did not hold the worker
        assert run_row(other.run_id).finished_at < wake_at  # type: ignore[operator]

    assert wait_for(lambda: run_row(waiting.run_id).status == "succeeded", timeout=WAIT), (
        cluster.log("w1")
    )
    done = run_row(waiting.run_id)
    assert (done.resume_count, done.executions, done.wake_at) == (0, 2, None)
    step = the_step(waiting.run_id)
    assert step.attempt == 2 and step.finished_at >= wake_at  # type: ignore[operator]
    (first,) = selectors.attempt_failures("limited", step.errors)
    assert (first.type, first.retry_after) == ("ledger.errors.RetryAfter", 4.0)
    assert "in rate_limited" in first.traceback


def test_a_lost_countdown_is_recovered_by_the_sweep(cluster, tmp_path, settings) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = float(SLEEP_MAX)
    with signals.held():  # this process executes it, and its countdown message is never sent
        run = transitions.run_start(agent="retry-later", inputs=limited(tmp_path, 2.0))
        outcome = run_execute(run_id=run.run_id, worker="lost-worker", heartbeat=False)
    assert outcome is not None and outcome.status == "queued"
    wake_at = run_row(run.run_id).wake_at
    assert wake_at is not None and cluster.published() == []

    cluster.worker("w1")
    cluster.beat()
    assert wait_for(lambda: run_row(run.run_id).status == "succeeded", timeout=WAIT), cluster.log(
        "w1"
    ) + cluster.log("beat")
    done = run_row(run.run_id)
    assert (done.executions, done.resume_count) == (2, 0)
    step = the_step(run.run_id)
    assert step.attempt == 2 and step.finished_at >= wake_at  # type: ignore[operator]
