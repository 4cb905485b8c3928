"""The run's stream and a cancel, on real Celery workers and PostgreSQL (issue 33, items 4-5):

1. a client reads a run's stream; the worker executing the run is SIGKILLed mid-run (its whole
   process group); the client reconnects with the id of the last event it saw, another worker
   resumes the run, and the client has seen every emitted event exactly once, in order — the
   resume's replay emitted nothing again;
2. a run inside a model call of 30 s is cancelled: the agent sees it at once (the model call
   ends with ``RunCancelled``, its ``finally`` runs), the execution is recorded ``cancelled``
   with who and why, and the worker is free for the next run long before the 30 s are up.
   The documented target is 2 s from the cancel's commit; the test prints what it measured and
   asserts only a bound the lease renewer's beat alone (every 20 s here) could not meet.

Sync and async agents alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from harness.cluster import Cluster, wait_for
from harness.unannounced import start_unannounced
from ledger import client as rl
from ledger import transitions
from ledger.models import AuditEvent, Execution, Run, StreamEvent
from runs.api import tokens
from runs.operations.tasks import start_run
from tests.support import stream_agents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 300  # seconds any condition may take on a loaded machine before the test fails
MODULES = f"ledger.examples.agents,{stream_agents.__name__}"


def _cluster(folder: Path, *, lease_seconds: float) -> Cluster:
    folder.mkdir(exist_ok=True)
    return Cluster(
        folder / "cluster",
        lease_seconds=lease_seconds,
        sweep_seconds=0.5,
        lost_after=3600.0,
        env={"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_TEST_STREAM_DIR": str(folder)},
    )


@pytest.fixture
def api() -> Iterator[rl.Client]:
    """The client, against the API in this process (httpx's WSGI transport into Django)."""
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="reader", role="viewer")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    with rl.Client("http://testserver", made.secret, transport=transport, backoff=0.05) as client:
        yield client


def _marked(folder: Path, name: str) -> bool:
    return any(folder.glob(f"{name}.*"))


@pytest.mark.parametrize("agent", [stream_agents.NAME, stream_agents.ASYNC_NAME])
def test_a_reader_reconnecting_after_a_worker_was_killed_sees_each_event_once_in_order(
    tmp_path: Path, api: rl.Client, agent: str
) -> None:
    folder = tmp_path / "stream"
    with _cluster(folder, lease_seconds=3.0) as cluster:
        victim = cluster.worker("victim")
        run = start_unannounced(agent=agent, inputs={"steps": 6, "hold_at": 3})
        cluster.send(start_run, run.run_id)

        seen: list[rl.StreamEvent] = []
        reader = api.stream(run.run_id)
        for event in reader:  # progress 0..3 come live; the run then holds inside step 3
            seen.append(event)
            if len(seen) == 4:
                break
        reader.close()  # the reader goes away (a closed tab, a dropped connection)
        assert wait_for(lambda: _marked(folder, "holding"), timeout=WAIT), cluster.log("victim")

        Cluster.kill(victim)  # SIGKILL, the whole group: the run's worker dies mid-run
        victim.wait(timeout=60)
        (folder / "gate").touch()
        cluster.beat()
        cluster.worker("rescuer")
        seen += list(api.stream(run.run_id, last_event_id=seen[-1].id))  # ends when it settles

        run.refresh_from_db()
        assert (run.status, run.executions) == ("succeeded", 2), cluster.log("rescuer")
        assert [(e.kind, e.data) for e in seen] == [
            *[("progress", {"i": i, "of": 6}) for i in range(6)],
            ("done", {"total": sum(i * i for i in range(6))}),
        ]
        ids = [e.id for e in seen]
        assert ids == sorted(set(ids))  # each once, in order
        stored = list(StreamEvent.objects.filter(run=run).order_by("id").values_list("id", "kind"))
        assert [i for i, _ in stored] == ids  # the resume's replay appended nothing again
    connection.close()


def _cancel_sees(folder: Path, run_id: str) -> float:
    """Cancel the run; seconds until its agent's ``finally`` ran (the model call ended)."""
    cancelled_at = time.monotonic()
    transitions.run_cancel(
        run_id=run_id, by="api:support", reason="the customer withdrew", seen_version=None
    )
    assert wait_for(lambda: _marked(folder, "finally"), timeout=15, interval=0.02)
    return time.monotonic() - cancelled_at


@pytest.mark.parametrize("agent", [stream_agents.SLOW, stream_agents.ASYNC_SLOW])
def test_a_cancel_ends_a_30_second_model_call_at_once_and_is_recorded_cancelled(
    tmp_path: Path, agent: str
) -> None:
    folder = tmp_path / "cancel"
    # A 60 s lease: the renewer beats every 20 s, so only the cancel's notification can make
    # the agent see it within the 15 s this test allows.
    with _cluster(folder, lease_seconds=60.0) as cluster:
        worker = cluster.worker("w1")  # one pool process: the next run waits for it
        run = start_unannounced(agent=agent, inputs={"prompt": "refund?"})
        cluster.send(start_run, run.run_id)
        assert wait_for(lambda: _marked(folder, "model"), timeout=WAIT), cluster.log("w1")

        seconds = _cancel_sees(folder, run.run_id)
        print(f"\n{agent}: the agent saw the cancel {seconds:.2f} s after its commit (target 2 s)")

        nxt = start_unannounced(agent=stream_agents.NAME, inputs={"steps": 1})
        cluster.send(start_run, nxt.run_id)
        done = lambda: Run.objects.get(pk=nxt.run_id).status == "succeeded"  # noqa: E731
        assert wait_for(done, timeout=20), cluster.log("w1")  # not behind the 30 s model call
        assert wait_for(
            lambda: "cancelled while it executed" in cluster.log("w1", tail=400), timeout=30
        ), cluster.log("w1")

        run.refresh_from_db()
        assert run.status == "cancelled"
        ex: Any = Execution.objects.get(run=run, number=1)
        assert ex.ending == "cancelled"
        assert ex.error == "cancelled by api:support: the customer withdrew"
        audit = AuditEvent.objects.get(run_id=run.run_id, action="run_cancel")
        assert (audit.actor, audit.reason) == ("api:support", "the customer withdrew")
        assert not run.steps.filter(step_id="ask").exists()  # the model's answer never landed
        assert worker.poll() is None
    connection.close()
