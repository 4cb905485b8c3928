"""Approval gates on real Celery workers and PostgreSQL: the approved effect is sent once under
SIGKILL (right after the approval is used with the intent, and inside the effect), never without
its approval; arguments changed between the approval and the resume ask again; approvers racing
on one gate — exactly one wins."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections

from harness.cluster import Cluster, wait_for
from harness.unannounced import start_unannounced
from ledger import signals, transitions
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Gate, Run, Step
from runs.operations.tasks import resume_run, start_run
from tests.support import gate_agents  # noqa: F401 (registers gated_amount here too)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

MODULES = "ledger.examples.agents,tests.support.gate_agents"
WAIT = 120


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "PYTHONPATH": str(settings.BASE_DIR)}
    with Cluster(tmp_path, lease_seconds=5.0, sweep_seconds=0.5, lost_after=2, env=env) as c:
        yield c
    connection.close()


def status(run_id: str) -> tuple[str, str]:
    return Run.objects.values_list("status", "reason").get(pk=run_id)  # type: ignore[return-value]


def at_gate(run_id: str) -> bool:
    return status(run_id) == ("needs_attention", "approval")


@pytest.mark.parametrize("point", ["gate.after_use", "charge.after_effect"])
def test_an_approved_effect_is_sent_once_when_the_worker_is_killed(
    cluster, django_user_model, point
) -> None:
    bob = django_user_model.objects.create_user(username="bob")
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1005"})
    victim = cluster.worker(
        "victim", env={"RUNLEDGER_KILL_AT": point, "RUNLEDGER_KILL_SCOPE": "group"}
    )
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: at_gate(run.run_id), timeout=WAIT), cluster.log("victim")
    assert ProviderCharge.objects.count() == 0
    assert not Step.objects.filter(run=run, step_id="pay_out").exists()
    gate = Gate.objects.get(run=run)
    with cluster.producing():  # the approval's resume goes to the cluster's broker
        transitions.gate_approve(gate=gate, by=bob, reason="ok")
    assert wait_for(lambda: victim.poll() is not None, timeout=WAIT), cluster.log("victim")
    sent = ProviderCharge.objects.count()
    assert sent == (0 if point == "gate.after_use" else 1)
    gate.refresh_from_db()
    assert gate.status == "used"  # committed with the intent, before anything was sent
    cluster.worker("rescuer")
    cluster.beat()
    assert wait_for(lambda: status(run.run_id)[0] == "succeeded", timeout=WAIT), cluster.log(
        "rescuer"
    )
    charge = ProviderCharge.objects.get()
    step = Step.objects.get(run=run, step_id="pay_out")
    assert charge.idempotency_key == step.effect_key == f"{run.run_id}:pay_out"
    gate.refresh_from_db()
    assert gate.used_at is not None and gate.used_at <= charge.created_at
    assert Gate.objects.filter(run=run).count() == 1  # never asked twice, never used twice
    assert AuditEvent.objects.filter(action="gate_approve").count() == 1


def test_arguments_changed_between_approval_and_resume_ask_again_on_a_worker(
    cluster, django_user_model, tmp_path
) -> None:
    bob = django_user_model.objects.create_user(username="bob")
    amount = tmp_path / "amount"
    amount.write_text("700")
    run = start_unannounced(
        agent="gated_amount", inputs={"path": str(amount), "customer": "cus_edsger"}
    )
    cluster.worker("w1")
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: at_gate(run.run_id), timeout=WAIT), cluster.log("w1")
    first = Gate.objects.get(run=run)
    with signals.held():  # approved, but no worker told yet
        transitions.gate_approve(gate=first, by=bob)
    amount.write_text("70000")
    cluster.send(resume_run, run.run_id)
    assert wait_for(
        lambda: Gate.objects.filter(run=run).count() == 2 and at_gate(run.run_id), timeout=WAIT
    ), cluster.log("w1")
    first.refresh_from_db()
    assert (first.status, first.void_reason) == ("void", "the arguments changed")
    assert ProviderCharge.objects.count() == 0
    second = Gate.objects.get(run=run, status="waiting")
    assert '"amount_cents":70000' in second.arguments_text
    with cluster.producing():
        transitions.gate_approve(gate=second, by=bob)
    assert wait_for(lambda: status(run.run_id)[0] == "succeeded", timeout=WAIT), cluster.log("w1")
    assert list(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [70000]


def test_approvers_racing_on_one_gate_exactly_one_wins_and_the_effect_is_sent_once(
    cluster, django_user_model
) -> None:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1006"})
    cluster.worker("w1")
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: at_gate(run.run_id), timeout=WAIT), cluster.log("w1")
    gate = Gate.objects.get(run=run)
    people = [django_user_model.objects.create_user(username=f"approver{i}") for i in range(6)]
    barrier = threading.Barrier(len(people))
    results: list[Any] = [None] * len(people)

    def approve(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = ("ok", transitions.gate_approve(gate=gate, by=people[i]))
        except Exception as exc:
            results[i] = ("error", exc)
        finally:
            connections.close_all()

    with cluster.producing():
        threads = [threading.Thread(target=approve, args=(i,)) for i in range(len(people))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    wins = [v for kind, v in results if kind == "ok"]
    losses = [v for kind, v in results if kind == "error"]
    assert len(wins) == 1, results
    assert all(isinstance(e, transitions.Conflict) for e in losses), losses
    assert all("already approved by" in str(e) for e in losses)
    assert wait_for(lambda: status(run.run_id)[0] == "succeeded", timeout=WAIT), cluster.log("w1")
    assert ProviderCharge.objects.count() == 1
    assert AuditEvent.objects.filter(action="gate_approve").count() == 1
    assert Gate.objects.get().approved_by == [wins[0].approved_by[0]]
