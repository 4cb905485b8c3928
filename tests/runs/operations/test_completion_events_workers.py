"""Completion events with real Celery workers and beat on PostgreSQL (issue 20, item 5): the
workers execute the runs, queue each run's event in the transaction that finishes it, and their
delivery task POSTs it to a receiver on loopback, where the ``standardwebhooks`` package
verifies every signature. A worker SIGKILLed right after a run's outcome committed, and another
killed after sending its event but before recording it, still leave exactly one event per
``webhook-id`` for the application to act on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from standardwebhooks.webhooks import Webhook

from harness.cluster import Cluster, wait_for
from ledger import events, transitions
from ledger.models import DeliveryStatus, Notification, Run
from tests.support import event_agents
from tests.support.receivers import EventReceiver

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

AGENT = event_agents.events_echo.name
WAIT = 120  # seconds any condition may take on a loaded machine before the test fails
ENV = {
    "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.event_agents",
    "PYTHONPATH": str(settings.BASE_DIR),
    "RUNLEDGER_NOTIFY_EVERY_SECONDS": "1",
    "RUNLEDGER_NOTIFY_TIMEOUT_SECONDS": "2",
    "RUNLEDGER_NOTIFY_BACKOFF_SECONDS": "1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, lease_seconds=5.0, sweep_seconds=0.5, lost_after=5, env=ENV) as c:
        yield c
    connection.close()


@pytest.fixture
def receiver() -> Iterator[EventReceiver]:
    r = EventReceiver()
    yield r
    r.stop()


def start(cluster: Cluster, **inputs: Any) -> Run:
    with cluster.producing():  # the start's enqueue goes to the cluster's broker
        return transitions.run_start(agent=AGENT, inputs={"n": 1, **inputs})


def test_workers_announce_each_finished_run_once_signed(cluster, receiver) -> None:
    _, secret = events.subscribe(receiver.url, agent=AGENT, events=["run.succeeded", "run.failed"])
    cluster.worker("w1", concurrency=2)
    cluster.worker("w2")
    cluster.beat()
    runs = [start(cluster, n=i) for i in range(4)]
    failing = start(cluster, n=9, fail="the card was declined")
    assert wait_for(lambda: len(receiver.taken()) >= 5, timeout=WAIT), cluster.log("w1")
    verifier = Webhook(secret)
    got = [verifier.verify(body, headers) for headers, body in receiver.received()]
    by_run = {e["data"]["run_id"]: e for e in got}
    assert {run_id: e["type"] for run_id, e in by_run.items()} == {
        **{r.run_id: "run.succeeded" for r in runs},
        failing.run_id: "run.failed",
    }
    assert by_run[runs[2].run_id]["data"]["result"] == {"echo": {"n": 2}}
    assert "the card was declined" in by_run[failing.run_id]["data"]["error"]
    rows = Notification.objects.filter(subscription__isnull=False)
    sent = {DeliveryStatus.SENT}
    assert wait_for(lambda: set(rows.values_list("status", flat=True)) == sent, timeout=WAIT)
    assert rows.count() == 5  # one event per run, and one id per event
    assert set(receiver.taken()) == {
        f"msg_{k}" for k in rows.values_list("idempotency_key", flat=True)
    }


def test_workers_killed_after_the_commit_and_after_the_send_leave_one_event(
    cluster, receiver
) -> None:
    _, secret = events.subscribe(receiver.url, agent=AGENT, events=["run.succeeded"])
    # w1 dies (its whole process group) right after the run's outcome and event committed.
    w1 = cluster.worker("w1", env={"RUNLEDGER_KILL_AT": "task.after_execute",
                                   "RUNLEDGER_KILL_SCOPE": "group"})  # fmt: skip
    run = start(cluster)
    assert wait_for(lambda: w1.poll() is not None, timeout=WAIT), cluster.log("w1")
    assert Run.objects.get(pk=run.run_id).status == "succeeded"
    row = Notification.objects.get(run_id=run.run_id)
    assert receiver.received() == []  # nobody delivered it yet
    # w2 delivers it and dies before recording that it did: the row is still "sending".
    w2 = cluster.worker("w2", env={"RUNLEDGER_KILL_AT": "notify.after_send",
                                   "RUNLEDGER_KILL_SCOPE": "group"})  # fmt: skip
    cluster.beat()
    assert wait_for(lambda: w2.poll() is not None, timeout=WAIT), cluster.log("w2")
    assert len(receiver.received()) == 1
    # w3 finds the lapsed claim and sends the event again, under the same webhook-id.
    cluster.worker("w3")
    row_sent = Notification.objects.filter(pk=row.pk, status=DeliveryStatus.SENT)
    assert wait_for(row_sent.exists, timeout=WAIT), cluster.log("w3")
    requests = receiver.received()
    assert len(requests) == 2 and Notification.objects.get(pk=row.pk).attempts == 2
    assert {h["webhook-id"] for h, _ in requests} == {f"msg_{row.idempotency_key}"}
    for headers, body in requests:
        assert Webhook(secret).verify(body, headers)["data"]["run_id"] == run.run_id
    assert len(receiver.taken()) == 1  # the application acts once
    assert Notification.objects.filter(subscription__isnull=False).count() == 1
