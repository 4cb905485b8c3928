"""Pauses, the execution record, a divergence's lookups and a broken agent module, with real
Celery workers (and beat) on PostgreSQL; SIGKILL is real. Asserts the ledger after the act."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from harness.cluster import Cluster, wait_for
from ledger import selectors, transitions
from ledger.engine.live import SETTLED_BY_LOOKUP
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import AuditAction, AuditEvent, Beacon, Execution, Run, Step
from runs.operations.tasks import start_run
from tests.support import breakable_agents, probe_agents  # noqa: F401 - registered here too

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

MODULES = "ledger.examples.agents,tests.support.breakable_agents,tests.support.probe_agents"
WAIT = 120  # seconds any condition may take on a loaded machine before the test fails


def cluster_env(**extra: str) -> dict[str, str]:
    return {"RUNLEDGER_AGENT_MODULES": MODULES, "PYTHONPATH": str(settings.BASE_DIR), **extra}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with (
        Cluster(tmp_path, lease_seconds=2, sweep_seconds=0.5, lost_after=2, env=cluster_env()) as c,
        c.producing(),
    ):  # what this process queues reaches the cluster's workers
        yield c
    connection.close()


def statuses(run_ids: list[str]) -> list[str]:
    found = dict(Run.objects.filter(pk__in=run_ids).values_list("run_id", "status"))
    return [found[r] for r in run_ids]


def endings(run_id: str) -> list[str]:
    return [e.ending for e in selectors.run_executions(run_id)]


def test_a_paused_tool_holds_runs_at_it_and_the_lift_queues_them_at_no_budget(cluster) -> None:
    cluster.worker("w1")
    pause = transitions.pause_create(
        scope="tool", target="refund_charge", by="ops", reason="the provider is down"
    )
    runs = [
        transitions.run_start(agent="refund", inputs={"invoice_id": i}).run_id
        for i in ("inv_1001", "inv_1003", "inv_1005")
    ]
    assert wait_for(lambda: statuses(runs) == ["paused"] * 3, timeout=WAIT), cluster.log("w1")
    assert ProviderCharge.objects.count() == 0  # nothing reached the paused tool
    for run in Run.objects.filter(pk__in=runs):
        assert (run.pause_id, run.blocked_step_id, run.resume_count) == (pause.pk, "refund", 0)
        assert "refund_charge" in run.detail and "the provider is down" in run.detail
        assert endings(run.run_id) == ["paused"]
    assert selectors.pause_held(pause.pk).count() == 3  # the count shown before the lift

    lifted = transitions.pause_lift(pause_id=pause.pk, by="ops", reason="it is back", expected=3)
    assert lifted.requeued == 3
    assert wait_for(lambda: statuses(runs) == ["succeeded"] * 3, timeout=WAIT), cluster.log("w1")
    assert ProviderCharge.objects.count() == 3
    for run in Run.objects.filter(pk__in=runs):
        assert (run.executions, run.resume_count, run.pause_id) == (2, 0, None)
        executions = selectors.run_executions(run.run_id)
        assert [e.ending for e in executions] == ["paused", "finished"]
        assert executions[1].replayed >= 3 and executions[1].executed >= 1
    event = AuditEvent.objects.get(action=AuditAction.UNPAUSE)
    assert event.after["requeued"] == 3 and sorted(event.after["run_ids"]) == sorted(runs)


def test_a_run_killed_twice_then_finishing_has_three_executions(cluster) -> None:
    cluster.beat()
    run_id = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}).run_id
    kill = {"RUNLEDGER_KILL_SCOPE": "group"}
    first = cluster.worker("first", env={**kill, "RUNLEDGER_KILL_AT": "charge.after_effect"})
    assert wait_for(lambda: first.poll() is not None, timeout=WAIT), cluster.log("first")
    second = cluster.worker("second", env={**kill, "RUNLEDGER_KILL_AT": "email.after_effect"})
    assert wait_for(lambda: second.poll() is not None, timeout=WAIT), cluster.log("second")
    cluster.worker("third")
    assert wait_for(lambda: statuses([run_id]) == ["succeeded"], timeout=WAIT), cluster.log("third")
    run = Run.objects.get(pk=run_id)
    assert (run.executions, run.resume_count) == (3, 2)
    assert ProviderCharge.objects.count() == OutboxMessage.objects.count() == 1
    rows = list(Execution.objects.filter(run_id=run_id).order_by("number"))
    assert [r.ending for r in rows] == ["crashed", "crashed", "finished"]
    assert [r.worker.split("@")[0] for r in rows] == ["first", "second", "third"]
    assert all(r.pid and r.host and r.task_id and r.ended_at for r in rows)
    assert all("found by the sweep" in r.error for r in rows[:2])
    # The third replayed what the first two recorded, and executed the rest.
    assert rows[2].replayed >= 4 and rows[2].executed >= 1


def test_a_diverged_run_looks_its_started_effect_up_before_it_stops(cluster) -> None:
    # Plan 2 of the renewal agent here and on the first worker, killed right after its
    # receipt email left; the next worker runs plan 1: a divergence, whose policy refuses.
    run_id = transitions.run_start(agent="renewal", inputs={"customer": "cus_knuth"}).run_id
    cluster.beat()
    victim = cluster.worker(
        "victim", env={"RUNLEDGER_KILL_AT": "email.after_effect", "RUNLEDGER_KILL_SCOPE": "group"}
    )
    assert wait_for(lambda: victim.poll() is not None, timeout=WAIT), cluster.log("victim")
    assert Step.objects.get(run_id=run_id, step_id="receipt").status == "started"
    cluster.worker("old_code", env={"RUNLEDGER_EXAMPLE_PLAN": "1"})
    assert wait_for(lambda: statuses([run_id]) == ["needs_attention"], timeout=WAIT), cluster.log(
        "old_code"
    )
    run = Run.objects.get(pk=run_id)
    assert run.reason == "divergence"
    receipt = Step.objects.get(run_id=run_id, step_id="receipt")
    # The lookup answered (the outbox has the message): recorded, not left for a person.
    assert (receipt.status, receipt.settled_by) == ("succeeded", SETTLED_BY_LOOKUP)
    assert receipt.result["message_id"] == OutboxMessage.objects.get().message_id
    assert "receipt: the lookup found it happened" in run.detail
    assert endings(run_id) == ["crashed", "needs_attention"]


def test_a_worker_with_a_broken_agent_module_takes_none_of_its_runs(cluster) -> None:
    cluster.beat()
    cluster.worker("broken", env={"RUNLEDGER_TEST_BREAK_AGENTS": "1"})

    def readyz() -> dict:
        return json.loads(Client().get("/readyz").content)["checks"]["agent_modules"]

    assert wait_for(
        lambda: Beacon.objects.filter(name__startswith="worker:broken@").exists(), timeout=WAIT
    ), cluster.log("broken")
    check = readyz()
    # Reported, but no reason to pull this web node: only its own broken import fails readiness.
    assert check["ok"] is True and "tests.support.breakable_agents" in check["warning"]
    assert "agent module tests.support.breakable_agents failed to import" in cluster.log("broken")

    lost = transitions.run_start(agent="breakable", inputs={"n": 7}).run_id
    other = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}).run_id
    assert wait_for(lambda: statuses([other]) == ["succeeded"], timeout=WAIT), cluster.log("broken")
    assert wait_for(
        lambda: f"run {lost}: not taken" in cluster.log("broken", tail=200_000), timeout=WAIT
    )
    # Left queued, never claimed nor failed.
    assert statuses([lost]) == ["queued"]
    assert Run.objects.get(pk=lost).executions == 0 and not Execution.objects.filter(run_id=lost)

    cluster.worker("healthy")  # the sweep sends the lost run again; a worker that has it runs it
    assert wait_for(lambda: statuses([lost]) == ["succeeded"], timeout=WAIT), cluster.log("healthy")
    assert [e.worker.split("@")[0] for e in selectors.run_executions(lost)] == ["healthy"]
    cluster.send(start_run, lost)  # a late copy changes nothing


def test_a_run_paused_while_it_executes_stops_at_its_next_step(cluster, tmp_path) -> None:
    cluster.worker("w1")
    gate = tmp_path / "gate"
    gate.mkdir()
    inputs = {"log": str(tmp_path / "probe.log"), "gate": str(gate), "hold": None}
    run_id = transitions.run_start(agent="probe", inputs=inputs).run_id
    assert wait_for(lambda: (gate / "first").exists(), timeout=WAIT), cluster.log("w1")
    pause = transitions.pause_create(scope="run", target=run_id, by="ops", reason="wait")

    def beat_after(moment):
        at = Run.objects.values_list("heartbeat_at", flat=True).get(pk=run_id)
        return at if at > moment else None

    # Two renewals after the pause: the first one's read of the pauses has finished.
    assert wait_for(lambda: beat_after(pause.created_at), timeout=WAIT)
    first = beat_after(pause.created_at)
    assert wait_for(lambda: beat_after(first), timeout=WAIT), cluster.log("w1")
    (gate / "release").touch()
    assert wait_for(lambda: statuses([run_id]) == ["paused"], timeout=WAIT), cluster.log("w1")
    run = Run.objects.get(pk=run_id)
    assert (run.pause_id, run.blocked_step_id) == (pause.pk, "report")
    assert not OutboxMessage.objects.exists()  # the email step after the hold never ran
    assert Step.objects.get(run_id=run_id, step_id="hold").status == "succeeded"
