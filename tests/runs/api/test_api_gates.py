"""Approval gates through the HTTP API: the waiting gates with their exact canonical arguments
and digest, approve and reject — by a person's approver token only — with the transitions'
refusals, each writing nothing; an approved effect is sent once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from harness.unannounced import start_unannounced
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Gate, Run
from ledger.processes.execute import run_execute
from runs.dashboard.roles import user_set_role
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)


def execute(run_id: str) -> Any:
    """One execution on the real clock (a gate's expiry is read on the real clock)."""
    return run_execute(run_id=run_id, worker="worker-1", heartbeat=False)


def at_gate(**inputs: Any) -> tuple[Run, Gate]:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003", **inputs})
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "approval"), outcome
    return Run.objects.get(pk=run.run_id), Gate.objects.get(run_id=run.run_id)


def refused(answer: Any, status: int, before: tuple[object, ...]) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert ledger_rows() == before
    return dict(answer.json())


def test_a_gate_is_listed_shown_and_approved_once_by_a_persons_token(caller: Any) -> None:
    run, gate = at_gate()
    viewer = caller("viewer")
    listed = viewer.get("/api/v1/approvals")
    assert listed.status_code == 200, listed.content
    [row] = listed.json()
    assert (row["id"], row["run_id"], row["step_id"], row["tool"]) == (
        gate.pk,
        run.run_id,
        "pay_out",
        "pay_out",
    )
    assert row["arguments_text"] == gate.arguments_text and row["digest"] == gate.digest
    assert row["arguments"] == json.loads(gate.arguments_text)
    assert row["status"] == "waiting" and row["run_status"] == "needs_attention"
    assert viewer.get(f"/api/v1/approvals/{gate.pk}").json() == row
    listed_runs = viewer.get("/api/v1/runs?status=needs_attention&reason=approval").json()
    assert [r["run_id"] for r in listed_runs["runs"]] == [run.run_id]

    before = ledger_rows()
    service = caller("operator", name="shop")  # a service's token
    doc = refused(service.post(f"/api/v1/approvals/{gate.pk}/approve", {}), 403, before)
    assert "may not approve" in doc["detail"]
    refused(service.post(f"/api/v1/approvals/{gate.pk}/reject", {"reason": "x"}), 403, before)
    olga = caller("operator", user="olga")  # a person, but not an approver
    refused(olga.post(f"/api/v1/approvals/{gate.pk}/approve", {}), 403, before)
    carl = caller("approver", user="carl")  # an approver token whose person lost the role
    user_set_role(user=User.objects.get(username="carl"), role="viewer")
    doc = refused(carl.post(f"/api/v1/approvals/{gate.pk}/approve", {}), 403, before)
    assert "role of the moment" in doc["detail"]  # it acts for its person as they are now
    alice = caller("approver", user="alice")
    refused(alice.post("/api/v1/approvals/999999/approve", {}), 404, before)
    refused(alice.post(f"/api/v1/approvals/{gate.pk}/approve", {"why": "x"}), 422, before)
    refused(alice.post(f"/api/v1/approvals/{gate.pk}/reject", {}), 422, before)  # no reason

    done = alice.post(f"/api/v1/approvals/{gate.pk}/approve", {"reason": "checked the invoice"})
    assert done.status_code == 200, done.content
    assert done.json()["status"] == "approved" and done.json()["approved_by"] == ["alice"]
    assert done.json()["run_status"] == "queued"
    event = AuditEvent.objects.get(action="gate_approve")
    assert (event.actor, event.reason, event.run_id) == ("alice", "checked the invoice", run.run_id)

    before = ledger_rows()
    again = refused(alice.post(f"/api/v1/approvals/{gate.pk}/approve", {}), 409, before)
    assert "already approved" in again["detail"]
    bob = caller("approver", user="bob")
    refused(bob.post(f"/api/v1/approvals/{gate.pk}/reject", {"reason": "late"}), 409, before)

    assert execute(run.run_id).status == "succeeded"
    assert ProviderCharge.objects.count() == 1
    gate.refresh_from_db()
    assert gate.status == "used" and gate.used_at is not None
    assert viewer.get("/api/v1/approvals").json() == []


def test_two_approvers_are_two_people_and_a_rejection_fails_the_run(caller: Any) -> None:
    run, gate = at_gate(four_eyes=True)
    alice, bob = caller("approver", user="alice"), caller("approver", user="bob")
    first = alice.post(f"/api/v1/approvals/{gate.pk}/approve", {})
    assert first.status_code == 200 and first.json()["status"] == "waiting"
    assert first.json()["approved_by"] == ["alice"] and first.json()["approvers_required"] == 2
    before = ledger_rows()
    doc = refused(alice.post(f"/api/v1/approvals/{gate.pk}/approve", {}), 403, before)
    assert doc["type"].endswith("/self-approval")
    rejected = bob.post(f"/api/v1/approvals/{gate.pk}/reject", {"reason": "wrong account"})
    assert rejected.status_code == 200, rejected.content
    assert rejected.json()["status"] == "rejected" and rejected.json()["decided_by"] == "bob"
    run.refresh_from_db()
    assert run.status == "failed" and "rejected by bob: wrong account" in run.error
    assert ProviderCharge.objects.count() == 0
