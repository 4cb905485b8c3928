"""Settling ambiguous effects by hand, end to end with the real engine and example agents.

Each path asserts the seed's pair after the resume: the run's outcome AND the count of each
external effect in the simulators' tables.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction

from ledger import selectors, transitions
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import AuditEvent, Run, Settlement, Step
from tests.support.operator_agents import LOOKUP, step_of

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def audit(run: Run) -> list[tuple[str, str]]:
    events = AuditEvent.objects.filter(run_id=run.run_id).order_by("at", "id")
    return list(events.values_list("action", "actor"))


def test_engine_writes_and_run_state_changes_bump_the_versions(execute, crash_at) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert run.version == 1
    crash_at("charge.before_effect")
    execute(run.run_id, crash_expected=True)
    run.refresh_from_db()
    assert run.version == 2  # claimed
    refund = step_of(run, "refund")
    fetch = step_of(run, "fetch_invoice")
    assert (refund.status, refund.version) == ("started", 1)  # inserted: the column default
    assert fetch.version == 2  # inserted, then pointed at the next step
    assert execute(run.run_id, worker="worker-2").status == "succeeded"
    run.refresh_from_db()
    assert run.version == 5  # claimed, resume counted, finished
    # started (insert), started again (upsert, attempt 2), succeeded, then pointed at the next
    assert step_of(run, "refund").version == 4


def test_an_unknown_notification_is_settled_as_happened_approved_and_resumed_once(
    execute, blocked, people, enqueued
) -> None:
    run = blocked("refund", {"invoice_id": "inv_1001"}, "notify.after_effect", "reconciliation")
    step = step_of(run, "notify")
    assert Notification.objects.count() == 1
    note = Notification.objects.get()
    proposal = transitions.settlement_propose(
        step=step,
        outcome="happened",
        result={"notification": note.pk, "channel": "#billing"},
        reason="the message is in #billing",
        by=people.alice,
        seen_version=step.version,
    )
    assert proposal.status == "proposed"
    assert step_of(run, "notify").status == "started"  # a proposal alone changes nothing
    with pytest.raises(transitions.SelfApproval):
        transitions.settlement_approve(settlement=proposal, by=people.alice)
    assert Settlement.objects.get().status == "proposed" and enqueued.ids == []

    transitions.settlement_approve(settlement=proposal, by=people.bob, reason="checked")

    settled = step_of(run, "notify")
    assert settled.status == "succeeded"
    assert settled.result == {"notification": note.pk, "channel": "#billing"}
    assert settled.settled_by == "alice, approved by bob"
    assert settled.version == step.version + 1
    run.refresh_from_db()
    assert run.status == "queued" and enqueued.ids == [run.run_id]
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by_name) == ("applied", "bob")
    assert audit(run) == [("settlement_propose", "alice"), ("settlement_approve", "bob")]
    approve = AuditEvent.objects.get(action="settlement_approve")
    assert approve.before["step"]["status"] == "started"
    assert approve.after["step"]["status"] == "succeeded"
    assert approve.after["run"]["status"] == "queued"

    outcome = execute(run.run_id, worker="worker-3")
    assert outcome.status == "succeeded"
    assert outcome.result["refunded"] is True
    assert Notification.objects.count() == 1
    assert (ProviderCharge.objects.count(), OutboxMessage.objects.count()) == (1, 1)


@pytest.mark.parametrize(
    ("point", "charged_before"), [("charge.before_effect", 0), ("charge.after_effect", 1)]
)
def test_did_not_happen_re_executes_the_charge_with_the_same_effect_key_once(
    execute, blocked, people, enqueued, point, charged_before
) -> None:
    """A charge without a read path: whether it reached the provider or not before the crash,
    "it did not happen" re-executes it under the same key and the provider charges once."""
    run = blocked("ops-blind", {"n": 700}, point, "reconciliation")
    step = step_of(run, "charge")
    key = step.effect_key
    assert ProviderCharge.objects.count() == charged_before
    proposal = transitions.settlement_propose(
        step=step,
        outcome="not_happened",
        reason="no charge in the provider's dashboard",
        by=people.alice,
        seen_version=step.version,
    )
    transitions.settlement_approve(settlement=proposal, by=people.bob)
    reset = step_of(run, "charge")
    assert (reset.status, reset.effect_key, reset.result) == ("pending", key, None)
    assert enqueued.ids == [run.run_id]

    outcome = execute(run.run_id, worker="worker-3")
    assert outcome.status == "succeeded"
    charged = step_of(run, "charge")
    assert (charged.status, charged.effect_key, charged.attempt) == ("succeeded", key, 2)
    charge = ProviderCharge.objects.get()
    assert charge.idempotency_key == key
    assert outcome.result == {"charge_id": charge.charge_id}


def test_abandon_abandons_the_step_and_cancels_the_run(execute, blocked, people, enqueued):
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    proposal = transitions.settlement_propose(
        step=step,
        outcome="abandon",
        reason="customer asked to stop",
        by=people.alice,
        seen_version=step.version,
    )
    transitions.settlement_approve(settlement=proposal, by=people.bob)
    assert step_of(run, "charge").status == "abandoned"
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert "abandoned by bob: customer asked to stop" in run.detail
    assert enqueued.ids == []
    assert execute(run.run_id, worker="worker-3") is None  # nothing to claim: cancel is final
    assert ProviderCharge.objects.count() == 1


def test_with_approval_off_a_settlement_applies_at_once(
    execute, blocked, people, enqueued, settings
) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = blocked("refund", {"invoice_id": "inv_1003"}, "notify.after_effect", "reconciliation")
    step = step_of(run, "notify")
    settlement = transitions.settlement_propose(
        step=step,
        outcome="happened",
        result={"notification": 1, "channel": "#billing"},
        reason="seen it",
        by=people.alice,
        seen_version=step.version,
    )
    assert (settlement.status, settlement.approval_required) == ("applied", False)
    assert step_of(run, "notify").settled_by == "alice"
    assert audit(run) == [("settlement_apply", "alice")]
    assert enqueued.ids == [run.run_id]
    assert execute(run.run_id, worker="worker-3").status == "succeeded"
    assert Notification.objects.count() == 1


def test_a_bad_or_oversized_result_is_refused_and_nothing_is_saved(
    blocked, people, settings
) -> None:
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    before = Step.objects.filter(run=run).values_list("step_id", "status", "version")
    before = sorted(before)

    with pytest.raises(transitions.InvalidInput, match=r"not valid JSON: .*line 1, column"):
        transitions.parse_result_text('{"charge_id": ch_1}')
    with pytest.raises(transitions.InvalidInput, match="enter the downstream"):
        transitions.parse_result_text("   ")
    settings.RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES = 100
    with pytest.raises(transitions.InvalidInput, match="bytes of JSON; the limit is 100"):
        transitions.parse_result_text(json.dumps({"blob": "x" * 200}))
    attempts: list[dict[str, Any]] = [
        {"outcome": "happened", "result": {"blob": "x" * 200}, "reason": "r"},
        {"outcome": "happened", "result": {"nan": float("nan")}, "reason": "r"},
        {"outcome": "happened", "result": None, "reason": "r"},
        {"outcome": "happened", "result": {"ok": 1}, "reason": "   "},
        {"outcome": "not_happened", "result": {"ok": 1}, "reason": "r"},
        {"outcome": "maybe", "result": None, "reason": "r"},
    ]
    for kwargs in attempts:
        with pytest.raises(transitions.InvalidInput):
            transitions.settlement_propose(
                step=step, by=people.alice, seen_version=step.version, **kwargs
            )
    assert sorted(Step.objects.filter(run=run).values_list("step_id", "status", "version")) == (
        before
    )
    assert not Settlement.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_form_opened_on_an_older_version_gets_a_conflict_with_the_current_state(
    blocked, people
) -> None:
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    with pytest.raises(transitions.Conflict, match="changed since you opened it") as info:
        transitions.settlement_propose(
            step=step,
            outcome="not_happened",
            reason="r",
            by=people.alice,
            seen_version=step.version - 1,
        )
    assert info.value.current["status"] == "started"
    assert info.value.current["version"] == step.version
    assert not Settlement.objects.exists() and not AuditEvent.objects.exists()


def test_one_waiting_proposal_per_step_and_an_outdated_one_is_superseded(blocked, people):
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    first = transitions.settlement_propose(
        step=step, outcome="not_happened", reason="r1", by=people.alice, seen_version=step.version
    )
    with pytest.raises(transitions.Conflict, match="already proposed 'not_happened'") as info:
        transitions.settlement_propose(
            step=step, outcome="abandon", reason="r2", by=people.carol, seen_version=step.version
        )
    assert info.value.current["settlement"] == first.pk
    # The step moves (an admin edits it); the waiting proposal is now out of date.
    moved = transitions.step_admin_edit(
        step=step,
        by="admin-script",
        reason="note the ticket",
        changes={"error": "see T-1"},
        seen_version=step.version,
    )
    with pytest.raises(transitions.Conflict, match="changed since the settlement was proposed"):
        transitions.settlement_approve(settlement=first, by=people.bob)
    first.refresh_from_db()
    assert first.status == "proposed"  # the refused approval wrote nothing
    second = transitions.settlement_propose(
        step=moved, outcome="abandon", reason="r2", by=people.carol, seen_version=moved.version
    )
    first.refresh_from_db()
    assert (first.status, second.status) == ("superseded", "proposed")


def test_a_rejected_proposal_leaves_the_step_and_cannot_be_approved(blocked, people) -> None:
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    proposal = transitions.settlement_propose(
        step=step,
        outcome="happened",
        result={"charge_id": "ch_guess"},
        reason="r",
        by=people.alice,
        seen_version=step.version,
    )
    with pytest.raises(transitions.InvalidInput, match="reason is required"):
        transitions.settlement_reject(settlement=proposal, by=people.bob, reason="")
    transitions.settlement_reject(settlement=proposal, by=people.bob, reason="that id is a guess")
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by_name) == ("rejected", "bob")
    assert step_of(run, "charge").status == "started"
    with pytest.raises(transitions.Conflict, match="already rejected by bob"):
        transitions.settlement_approve(settlement=proposal, by=people.carol)
    run.refresh_from_db()
    assert run.status == "needs_attention"
    assert audit(run) == [("settlement_propose", "alice"), ("settlement_reject", "bob")]


def test_settling_an_effect_while_a_worker_sends_it_is_refused(execute, people, settings):
    """The dangerous race: an operator answers "it did not happen" while a worker is in the
    middle of sending it. The run is running, so the answer is refused and nothing changes."""
    import threading

    from django.db import connections

    from harness import faults

    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    seen: dict[str, Any] = {}

    def operator_acts() -> None:
        try:
            step = step_of(run, "refund")
            transitions.settlement_propose(
                step=step,
                outcome="not_happened",
                reason="looks stuck",
                by="alice",
                seen_version=step.version,
            )
        except transitions.OperationError as exc:
            seen["error"] = exc
        finally:
            connections.close_all()

    def in_the_middle() -> None:
        other = threading.Thread(target=operator_acts)
        other.start()
        other.join()

    faults.set_hook("charge.before_effect", in_the_middle)
    try:
        outcome = execute(run.run_id)
    finally:
        faults.clear_hooks()
    assert isinstance(seen["error"], transitions.NotAllowed)
    assert "executing run" in str(seen["error"])
    assert outcome.status == "succeeded"
    assert ProviderCharge.objects.count() == 1
    assert step_of(run, "refund").attempt == 1
    assert not Settlement.objects.exists() and not AuditEvent.objects.exists()


def test_look_it_up_again_records_the_answer_and_leaves_the_step(
    execute, blocked, people, enqueued
) -> None:
    run = blocked("ops-maybe", {"n": 1200}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    unknown = transitions.step_reconcile_again(step=step, by=people.alice)
    assert unknown.outcome == "unknown"
    LOOKUP["mode"] = "ask"  # the provider's lookup works again
    found = transitions.step_reconcile_again(step=step, by=people.alice)
    charge = ProviderCharge.objects.get()
    assert found.outcome == "happened"
    assert found.result == {
        "charge_id": charge.charge_id,
        "customer": "cus_maybe",
        "amount_cents": 1200,
    }
    assert step_of(run, "charge").version == step.version  # evidence only: the step is unchanged
    events = AuditEvent.objects.filter(action="reconcile_lookup").order_by("id")
    assert [e.after["outcome"] for e in events] == ["unknown", "happened"]
    evidence = selectors.settlement_evidence(step=step)
    assert evidence.settleable and evidence.has_reconcile
    assert evidence.lookup_answer["result"]["charge_id"] == charge.charge_id
    # The person settles with what the lookup found; the resume replays it.
    proposal = transitions.settlement_propose(
        step=step,
        outcome="happened",
        result=found.result,
        reason="the lookup found it",
        by=people.alice,
        seen_version=step.version,
    )
    transitions.settlement_approve(settlement=proposal, by=people.bob)
    assert execute(run.run_id, worker="worker-3").status == "succeeded"
    assert ProviderCharge.objects.count() == 1


def test_look_it_up_again_needs_a_read_path_and_no_open_transaction(blocked, people) -> None:
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    with pytest.raises(transitions.NotAllowed, match="no read path"):
        transitions.step_reconcile_again(step=step, by=people.alice)
    with pytest.raises(RuntimeError, match="not in a transaction"), transaction.atomic():
        transitions.step_reconcile_again(step=step, by=people.alice)
    assert not AuditEvent.objects.exists()


def test_only_a_started_effect_can_be_settled(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    step = step_of(run, "refund")
    with pytest.raises(transitions.NotAllowed, match="succeeded effect step"):
        transitions.settlement_propose(
            step=step,
            outcome="not_happened",
            reason="r",
            by=people.alice,
            seen_version=step.version,
        )
    assert selectors.settlement_evidence(step=step).settleable is False


def test_the_queue_lists_waiting_effects_oldest_first_and_reading_writes_nothing(
    blocked, people, execute, crash_at
) -> None:
    first = blocked("refund", {"invoice_id": "inv_1001"}, "notify.after_effect", "reconciliation")
    second = blocked("ops-maybe", {"n": 3}, "charge.after_effect", "reconciliation")
    running = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1003"})
    crash_at("charge.after_effect")
    execute(running.run_id, crash_expected=True)  # started, its (dead) worker still "running"
    step = step_of(first, "notify")
    transitions.settlement_propose(
        step=step, outcome="not_happened", reason="r", by=people.alice, seen_version=step.version
    )
    events = AuditEvent.objects.count()

    queue = selectors.settlement_queue()
    assert [(i.run_id, i.step_id) for i in queue] == [
        (first.run_id, "notify"),
        (second.run_id, "charge"),
    ]
    head = queue[0]
    assert (head.agent, head.tool, head.has_reconcile) == ("refund", "notify_team", False)
    assert head.effect_key == f"{first.run_id}:notify"
    assert head.proposal is not None and head.proposal.proposed_by_name == "alice"
    assert queue[1].has_reconcile is True and queue[1].proposal is None
    assert all(i.waiting_seconds >= 0 for i in queue)
    selectors.settlement_evidence(step=step)
    list(selectors.settlements_waiting())
    list(selectors.audit_events(run_id=first.run_id, actor="alice"))
    assert AuditEvent.objects.count() == events  # opening the pages wrote nothing


def test_a_settlement_stands_when_the_run_waits_for_a_raised_budget(
    execute, crash_at, people, enqueued
) -> None:
    run = transitions.run_start(agent="ops-blind", inputs={"n": 40}, max_resumes=0)
    crash_at("charge.after_effect")
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id, worker="worker-2").reason == "budget"
    step = step_of(run, "charge")
    assert [i.step_id for i in selectors.settlement_queue()] == ["charge"]
    proposal = transitions.settlement_propose(
        step=step, outcome="not_happened", reason="r", by=people.alice, seen_version=step.version
    )
    transitions.settlement_approve(settlement=proposal, by=people.bob)
    assert step_of(run, "charge").status == "pending"
    run.refresh_from_db()
    assert (run.status, run.reason, enqueued.ids) == ("needs_attention", "budget", [])
    approve = AuditEvent.objects.get(action="settlement_approve")
    assert approve.after["resume"].startswith("not queued: the resume budget is used up")
    transitions.run_resume(
        run_id=run.run_id,
        by=people.bob,
        reason="settled",
        seen_version=run.version,
        max_resumes=1,
    )
    assert enqueued.ids == [run.run_id]
    assert execute(run.run_id, worker="worker-3").status == "succeeded"
    assert ProviderCharge.objects.count() == 1
