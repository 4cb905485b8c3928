"""Sleeps and events in (issue 33) on real Celery workers and PostgreSQL, sync and async agents:

1. a run sleeping an hour (on the workers' clock, which the test moves: ``harness.faults``'
   RUNLEDGER_CLOCK_OFFSET_FILE) is released: it holds no worker slot (a one-slot worker runs
   another run meanwhile), no lease and no connection; its worker is SIGKILLed during the sleep;
   a new worker does not take it before it is due (not shortened), and once the clock reaches
   the due time the ledger holds the periodic sweep (beat) wakes it with no message sent for
   it (not repeated), costing no resume budget;
2. three events, sent before, during and after the run's wait, with the worker SIGKILLed
   between the second event's arrival and its step's commit (``mailbox.before_commit``): each
   is taken exactly once, in order; the same event id sent twice is one event.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from harness.unannounced import start_unannounced
from ledger import api
from ledger.models import Beacon, MailboxEvent, Run, Step
from runs.operations.tasks import resume_run, start_run
from tests.support import wait_agents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 120  # seconds any condition may take on a loaded machine before the test fails
HOUR = 3600.0
MODULES = f"ledger.examples.agents,{wait_agents.__name__}"
SYNC_AND_ASYNC = pytest.mark.parametrize("suffix", ["", "-async"])


@pytest.fixture
def offset(tmp_path: Path) -> Path:
    path = tmp_path / "clock-offset"
    path.write_text("0")
    return path


@pytest.fixture
def cluster(tmp_path: Path, offset: Path) -> Iterator[Cluster]:
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_CLOCK_OFFSET_FILE": str(offset)}
    with Cluster(
        tmp_path / "cluster", lease_seconds=3.0, sweep_seconds=0.5, lost_after=3600.0, env=env
    ) as c:
        yield c
    connection.close()


def run_row(run_id: str) -> Run:
    return Run.objects.get(pk=run_id)


def busy_backends() -> int:
    """Client connections to this database doing something (a query, or a transaction left
    open), other than this test's own."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')"
        )
        return int(cur.fetchone()[0])


@SYNC_AND_ASYNC
def test_a_sleeping_run_holds_nothing_survives_a_sigkill_and_wakes_when_due(
    suffix: str, cluster: Cluster, tmp_path: Path, offset: Path
) -> None:
    marks = str(tmp_path / "marks")
    w1 = cluster.worker("w1", concurrency=1)  # one slot
    sleeper = start_unannounced(
        agent=f"sleeper{suffix}", inputs={"seconds": HOUR, "marks": marks}
    ).run_id
    cluster.send(start_run, sleeper)
    assert wait_for(lambda: run_row(sleeper).wake_at is not None, timeout=WAIT), cluster.log("w1")
    released = run_row(sleeper)
    due = Step.objects.get(run_id=sleeper, step_id="nap").result["due"]
    assert released.wake_at is not None and released.wake_at.isoformat() == due
    assert (released.status, released.lease_token, released.lease_owner) == ("queued", None, "")

    # The one slot is free: another run goes through the same worker while the first sleeps.
    other = start_unannounced(
        agent=f"sleeper{suffix}", inputs={"seconds": 0, "marks": str(tmp_path / "other")}
    ).run_id
    cluster.send(start_run, other)
    assert wait_for(lambda: run_row(other).status == "succeeded", timeout=WAIT), cluster.log("w1")
    assert wait_for(lambda: busy_backends() == 0, timeout=WAIT)  # no connection held for it

    cluster.kill(w1)  # SIGKILL during the sleep
    w1.wait(timeout=30)
    cluster.worker("w2", concurrency=1)
    cluster.send(resume_run, sleeper)  # delivered early: not claimable before it is due
    assert wait_for(lambda: "not claimable" in cluster.log("w2", tail=200), timeout=WAIT)
    early = run_row(sleeper)
    assert (early.status, early.wake_at, early.executions) == ("queued", released.wake_at, 1)
    assert wait_agents.marks(marks) == ["before"]

    cluster.beat()  # the periodic sweep: it must not wake the run early either
    assert wait_for(lambda: Beacon.objects.filter(name="sweep").exists(), timeout=WAIT)
    Beacon.objects.all().delete()
    assert wait_for(lambda: Beacon.objects.filter(name="sweep").exists(), timeout=WAIT)
    assert (run_row(sleeper).status, run_row(sleeper).executions) == ("queued", 1)

    # The workers' clock passes the due time. No message is sent: the early one was refused,
    # the timed one (an hour of real time) is far off; the sweep wakes the run when it is due.
    offset.write_text(str(HOUR + 1))
    assert wait_for(lambda: run_row(sleeper).status == "succeeded", timeout=WAIT), cluster.log("w2")
    done = run_row(sleeper)
    assert (done.resume_count, done.executions, done.wake_at) == (0, 2, None)
    assert Step.objects.get(run_id=sleeper, step_id="nap").result == {"due": due}
    assert wait_agents.marks(marks) == ["before", "after"]


@SYNC_AND_ASYNC
def test_events_before_during_and_after_a_wait_are_taken_once_in_order_across_a_sigkill(
    suffix: str, cluster: Cluster, tmp_path: Path
) -> None:
    marks = str(tmp_path / "marks")
    died = tmp_path / "died"
    kill = {
        "RUNLEDGER_KILL_AT": "mailbox.before_commit@2",  # the second event's take
        "RUNLEDGER_KILL_SCOPE": "group",
        "RUNLEDGER_KILL_MARK": str(died),
    }
    cluster.worker("w1", concurrency=1, env=kill)
    cluster.beat()  # the sweep: it re-queues the killed worker's run once its lease expires
    run_id = start_unannounced(
        agent=f"listener{suffix}", inputs={"count": 3, "marks": marks}
    ).run_id
    api.send_event(run_id, "reply", {"n": 1}, event_id="before")
    cluster.send(start_run, run_id)
    assert wait_for(lambda: run_row(run_id).wait_event == "reply", timeout=WAIT), cluster.log("w1")

    with cluster.producing():  # the wake-up reaches the cluster's broker
        api.send_event(run_id, "reply", {"n": 2}, event_id="during")
    assert wait_for(died.exists, timeout=WAIT), cluster.log("w1")  # died before the commit
    assert MailboxEvent.objects.get(event_id="during").consumed_step_id == ""
    assert not Step.objects.filter(run_id=run_id, step_id="reply.1", status="succeeded").exists()
    with cluster.producing():
        api.send_event(run_id, "reply", {"n": 3}, event_id="after")
        api.send_event(run_id, "reply", {"n": 3}, event_id="after")  # the same event again

    cluster.worker("w2", concurrency=1)
    assert wait_for(lambda: run_row(run_id).status == "succeeded", timeout=WAIT), cluster.log(
        "w2"
    ) + cluster.log("beat")
    assert run_row(run_id).result == {"got": [{"n": 1}, {"n": 2}, {"n": 3}]}
    taken = list(MailboxEvent.objects.order_by("pk").values_list("event_id", "consumed_step_id"))
    assert taken == [("before", "reply.0"), ("during", "reply.1"), ("after", "reply.2")]
    assert wait_agents.marks(marks) == ["got 0", "got 1", "got 2"]
