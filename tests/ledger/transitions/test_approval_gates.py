"""Approval gates in one process (the worker's execution called directly, a fake clock): the run
stops before the intent row, the approval binds the arguments' digest and expiry, is used once,
and every refusal writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger import transitions
from ledger.errors import AgentDefinitionError, Conflict, NotAllowed, SelfApproval
from ledger.examples.models import Notification as SentTeamMessage
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Gate, Notification, Run, Step
from ledger.registry import Approval, tool
from tests.support import gate_agents  # noqa: F401 (registers gated_amount)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def approve(clock: Any) -> Any:
    return lambda **kw: transitions.gate_approve(clock=clock, **kw)


@pytest.fixture
def reject(clock: Any) -> Any:
    return lambda **kw: transitions.gate_reject(clock=clock, **kw)


def rows() -> dict[str, Any]:
    """Everything a refusal must leave as it was."""
    return {
        "runs": list(Run.objects.values_list("run_id", "status", "reason", "version")),
        "steps": list(Step.objects.values_list("step_id", "status", "version")),
        "gates": list(Gate.objects.values_list("pk", "status", "approved_by", "links_used")),
        "audit": AuditEvent.objects.count(),
        "charges": ProviderCharge.objects.count(),
    }


def blocked_payout(execute: Any, inputs: dict[str, Any] | None = None) -> tuple[Run, Gate]:
    run = start_unannounced(agent="payout", inputs=inputs or {"invoice_id": "inv_1001"})
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "approval",
        "pay_out",
    )
    run.refresh_from_db()
    return run, Gate.objects.get(run=run)


def test_a_gated_effect_stops_the_run_before_its_intent_with_the_exact_arguments(
    execute, clock
) -> None:
    run, gate = blocked_payout(execute)
    assert not Step.objects.filter(run=run, step_id="pay_out").exists()  # no intent row
    assert ProviderCharge.objects.count() == 0
    assert gate.arguments_text == '{"amount_cents":4200,"customer":"cus_ada"}'
    fetch = Step.objects.get(run=run, step_id="fetch_invoice")
    assert fetch.status == "succeeded"
    from ledger.canonical import hash_text

    assert gate.digest == hash_text(gate.arguments_text)
    assert (gate.status, gate.approvers_required, gate.on_reject) == ("waiting", 1, "raise")
    # A resume before anyone decided asks the same gate again: no second gate.
    transitions.run_resume(
        run_id=run.run_id, by="cli:ops", reason="poke", seen_version=None, clock=clock
    )
    assert execute(run.run_id).reason == "approval"
    assert Gate.objects.filter(run=run).count() == 1


def test_approved_the_effect_is_sent_once_under_its_effect_key_and_the_approval_is_used(
    execute, people, enqueued, approve
) -> None:
    run, gate = blocked_payout(execute)
    approve(gate=gate, by=people.bob, reason="checked the invoice")
    assert enqueued.ids == [run.run_id]
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    charge = ProviderCharge.objects.get()
    step = Step.objects.get(run=run, step_id="pay_out")
    assert (step.status, step.effect_key) == ("succeeded", f"{run.run_id}:pay_out")
    assert charge.idempotency_key == step.effect_key
    gate.refresh_from_db()
    assert (gate.status, gate.approved_by) == ("used", ["bob"])
    audit = AuditEvent.objects.get(action="gate_approve")
    assert (audit.actor, audit.run_id, audit.step_id) == ("bob", run.run_id, "pay_out")


def test_a_rejection_raises_approval_rejected_in_the_agent_which_handles_it(
    execute, people, reject
) -> None:
    run, gate = blocked_payout(execute)
    reject(gate=gate, by=people.carol, reason="not ours to pay")
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result == {"paid": False, "rejected_by": "carol"}
    assert ProviderCharge.objects.count() == 0
    assert SentTeamMessage.objects.count() == 1
    step = Step.objects.get(run=run, step_id="pay_out")
    assert step.status == "failed" and "rejected by carol" in step.error
    assert step.effect_key is None
    # The path is recorded through the rejected step: fetch → pay_out → notify.
    chain = dict(Step.objects.filter(run=run).values_list("step_id", "next_step_id"))
    assert chain["fetch_invoice"] == "pay_out" and chain["pay_out"] == "notify"


def test_four_eyes_needs_two_different_approvers_and_a_rejection_fails_the_run(
    execute, people, approve, reject
) -> None:
    run, gate = blocked_payout(execute, {"invoice_id": "inv_1001", "four_eyes": True})
    assert gate.approvers_required == 2
    approve(gate=gate, by=people.bob)
    before = rows()
    with pytest.raises(SelfApproval):
        approve(gate=gate, by=people.bob)
    assert rows() == before
    run.refresh_from_db()
    assert (run.status, run.reason) == ("needs_attention", "approval")  # still waiting
    reject(gate=gate, by=people.carol, reason="amount looks wrong")
    run.refresh_from_db()
    assert run.status == "failed" and "rejected by carol" in run.error
    assert ProviderCharge.objects.count() == 0


def test_four_eyes_approved_by_two_people_pays_once(execute, people, approve) -> None:
    run, gate = blocked_payout(execute, {"invoice_id": "inv_1001", "four_eyes": True})
    approve(gate=gate, by=people.bob)
    approve(gate=gate, by=people.carol)
    assert execute(run.run_id).status == "succeeded"
    gate.refresh_from_db()
    assert gate.approved_by == ["bob", "carol"] and gate.status == "used"
    assert ProviderCharge.objects.count() == 1


def test_arguments_changed_between_approval_and_resume_void_it_and_ask_again(
    execute, people, tmp_path: Path, approve, clock
) -> None:
    amount = tmp_path / "amount"
    amount.write_text("500")
    run = start_unannounced(
        agent="gated_amount", inputs={"path": str(amount), "customer": "cus_ada"}
    )
    assert execute(run.run_id).reason == "approval"
    first = Gate.objects.get(run=run)
    approve(gate=first, by=people.bob)
    amount.write_text("50000")  # the read expires at once: the resume reads this
    clock.advance(1)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "approval")
    assert "arguments differ" in outcome.detail
    first.refresh_from_db()
    assert (first.status, first.void_reason) == ("void", "the arguments changed")
    second = Gate.objects.exclude(pk=first.pk).get(run=run)
    assert second.status == "waiting" and '"amount_cents":50000' in second.arguments_text
    assert (
        ProviderCharge.objects.count() == 0
        and not Step.objects.filter(run=run, step_id="pay_out").exists()
    )
    approve(gate=second, by=people.bob)
    assert execute(run.run_id).status == "succeeded"
    assert ProviderCharge.objects.get().amount_cents == 50000


def test_an_expired_gate_refuses_approval_and_an_unused_approval_expires(
    execute, people, clock, approve
) -> None:
    run, gate = blocked_payout(execute)
    clock.advance(86400 + 1)
    before = rows()
    with pytest.raises(NotAllowed, match="expired"):
        approve(gate=gate, by=people.bob)
    assert rows() == before
    # Approved in time but resumed too late: the approval is void, the gate asked again.
    transitions.run_resume(
        run_id=run.run_id, by="cli:ops", reason="ask again", seen_version=None, clock=clock
    )
    assert execute(run.run_id).reason == "approval"
    gate.refresh_from_db()
    assert gate.status == "void"
    fresh = Gate.objects.get(run=run, status="waiting")
    approve(gate=fresh, by=people.bob)
    clock.advance(86400 + 1)
    assert execute(run.run_id).reason == "approval"
    fresh.refresh_from_db()
    assert (fresh.status, fresh.void_reason) == ("void", "it expired unused")
    assert ProviderCharge.objects.count() == 0


def test_a_second_approval_and_an_approval_of_a_step_not_waiting_are_refused(
    execute, people, approve, reject
) -> None:
    run, gate = blocked_payout(execute)
    approve(gate=gate, by=people.bob)
    before = rows()
    with pytest.raises(Conflict, match="already approved by bob"):
        approve(gate=gate, by=people.carol)
    with pytest.raises(Conflict):
        reject(gate=gate, by=people.carol, reason="too late")
    assert rows() == before
    execute(run.run_id)
    before = rows()
    with pytest.raises(Conflict, match="already used"):
        approve(gate=gate, by=people.carol)
    assert rows() == before


def test_a_gate_of_a_run_that_no_longer_waits_there_is_refused(
    execute, people, approve, reject, clock
) -> None:
    run, gate = blocked_payout(execute)
    transitions.run_cancel(
        run_id=run.run_id, by="cli:ops", reason="stop", seen_version=None, clock=clock
    )
    before = rows()
    with pytest.raises(NotAllowed, match="does not wait at step 'pay_out'"):
        approve(gate=gate, by=people.bob)
    with pytest.raises(transitions.InvalidInput):
        reject(gate=gate, by=people.bob, reason="  ")
    assert rows() == before


def test_the_gate_is_notified_once_with_a_signed_link_per_approver(
    execute, people, settings, approve, clock
) -> None:
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    from django.contrib.auth.models import Permission

    people.bob.user_permissions.add(Permission.objects.get(codename="approve_settlements"))
    run, gate = blocked_payout(execute)
    transitions.run_resume(
        run_id=run.run_id, by="cli:ops", reason="poke", seen_version=None, clock=clock
    )
    execute(run.run_id)  # the same gate asked again: no second notification
    note = Notification.objects.get(run_id=run.run_id)
    assert note.kind == "gate_waiting" and note.event_key == f"gate_waiting:{gate.pk}"
    payload = note.payload["gate"]
    assert payload["digest"] == gate.digest and payload["arguments"] == gate.arguments_text
    assert list(payload["links"]) == ["bob"]
    token = payload["links"]["bob"].rstrip("/").rsplit("/", 1)[1]
    link = transitions.gate_link_check(token=token, username="bob")
    assert link.gate.pk == gate.pk
    with pytest.raises(NotAllowed, match="another user"):
        transitions.gate_link_check(token=token, username="carol")
    with pytest.raises(NotAllowed, match="not valid"):
        transitions.gate_link_check(token=token[:-2] + "xx", username="bob")
    approve(gate=gate, by=people.bob, link_nonce=link.nonce)
    before = rows()
    with pytest.raises(NotAllowed, match="used already"):
        transitions.gate_link_check(token=token, username="bob")
    assert rows() == before


def test_an_expired_link_is_refused(execute, people, settings) -> None:
    settings.RUNLEDGER_APPROVAL_LINK_SECONDS = -1.0
    _run, gate = blocked_payout(execute)
    token = transitions.gate_link_token(gate=gate, username="bob")
    before = rows()
    with pytest.raises(NotAllowed, match="expired"):
        transitions.gate_link_check(token=token, username="bob")
    assert rows() == before


def test_approval_is_declared_on_effects_only_and_cannot_be_switched_off_by_a_call() -> None:
    with pytest.raises(AgentDefinitionError, match="only effects"):
        tool(kind="read", approval=True)(lambda x: x)
    with pytest.raises(AgentDefinitionError, match="approvers must be 1 or 2"):
        Approval(approvers=3)
    with pytest.raises(AgentDefinitionError, match="on_reject"):
        Approval(on_reject="ignore")  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="reserved"):
        tool(kind="effect")(lambda approval, *, idempotency_key: None)
