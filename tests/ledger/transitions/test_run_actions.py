"""Run actions (resume, retry, cancel, fork), bulk actions, admin edits and the audit itself."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection, transaction

from ledger import selectors, transitions
from ledger.examples import agents as examples
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import AppendOnly, AuditEvent, Run, Step
from ledger.processes import resume
from ledger.processes.preview import preview_resume
from tests.support.operator_agents import step_of

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def run_row(run: Run) -> tuple:
    return Run.objects.filter(pk=run.pk).values_list("status", "version", "max_resumes").get()


@pytest.fixture
def budget_stopped(execute, crash_at) -> Run:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}, max_resumes=1)
    crash_at("fetch_invoice", times=2)
    execute(run.run_id, crash_expected=True)
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id).reason == "budget"
    run.refresh_from_db()
    return run


def test_resume_raises_the_budget_audits_and_enqueues(execute, budget_stopped, people, enqueued):
    run = budget_stopped
    with pytest.raises(transitions.NotAllowed, match="budget is used up"):
        resume.run_resume(run_id=run.run_id, by=people.alice, reason="r", seen_version=run.version)
    with pytest.raises(transitions.NotAllowed, match="raised, not lowered"):
        resume.run_resume(
            run_id=run.run_id, by=people.alice, reason="r", seen_version=run.version, max_resumes=0
        )
    assert not AuditEvent.objects.exists() and enqueued.ids == []
    resume.run_resume(
        run_id=run.run_id,
        by=people.alice,
        reason="the invoice service is back",
        seen_version=run.version,
        max_resumes=3,
    )
    assert run_row(run) == ("queued", run.version + 1, 3)
    assert enqueued.ids == [run.run_id]
    event = AuditEvent.objects.get()
    assert (event.action, event.actor) == ("run_resume", "alice")
    assert (event.before["max_resumes"], event.after["max_resumes"]) == (1, 3)
    assert execute(run.run_id).status == "succeeded"


def test_an_action_on_a_run_that_moved_is_a_conflict_and_changes_nothing(
    budget_stopped, people
) -> None:
    run = budget_stopped
    resume.run_resume(
        run_id=run.run_id, by=people.bob, reason="r", seen_version=run.version, max_resumes=3
    )
    with pytest.raises(
        transitions.Conflict, match=r"changed since you opened it.*now queued"
    ) as info:
        transitions.run_cancel(
            run_id=run.run_id, by=people.alice, reason="stop it", seen_version=run.version
        )
    assert info.value.current["status"] == "queued"
    assert run_row(run)[0] == "queued"
    assert AuditEvent.objects.count() == 1


def test_cancel_is_final_and_recorded(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    with pytest.raises(transitions.InvalidInput, match="reason is required"):
        transitions.run_cancel(
            run_id=run.run_id, by=people.alice, reason="", seen_version=run.version
        )
    with pytest.raises(transitions.InvalidInput, match="signed-in"):
        transitions.run_cancel(
            run_id=run.run_id, by=AnonymousUser(), reason="r", seen_version=run.version
        )
    transitions.run_cancel(
        run_id=run.run_id, by=people.alice, reason="duplicate request", seen_version=run.version
    )
    run.refresh_from_db()
    assert run.status == "cancelled" and run.detail == "cancelled by alice: duplicate request"
    assert execute(run.run_id) is None
    with pytest.raises(transitions.NotAllowed, match="already cancelled"):
        transitions.run_cancel(
            run_id=run.run_id, by=people.alice, reason="again", seen_version=run.version
        )
    with pytest.raises(
        transitions.NotAllowed, match="resume applies to a run that is needs attention"
    ):
        resume.run_resume(run_id=run.run_id, by=people.alice, reason="r", seen_version=run.version)
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["run_cancel"]
    assert not Step.objects.filter(run=run).exists()


def test_retry_runs_a_failed_step_again(execute, people, enqueued, monkeypatch) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_2999"})
    assert execute(run.run_id).status == "failed"
    run.refresh_from_db()
    monkeypatch.setitem(
        examples.INVOICES, "inv_2999", {"customer": "cus_ken", "total_cents": 300, "reason": "x"}
    )
    resume.run_retry(
        run_id=run.run_id,
        by=people.alice,
        reason="invoice imported",
        seen_version=run.version,
    )
    assert enqueued.ids == [run.run_id]
    assert execute(run.run_id).status == "succeeded"
    fetch = step_of(run, "fetch_invoice")
    assert (fetch.status, fetch.attempt, len(fetch.errors)) == ("succeeded", 4, 3)
    run.refresh_from_db()
    with pytest.raises(transitions.NotAllowed, match="retry applies to a run that is failed"):
        resume.run_retry(run_id=run.run_id, by=people.alice, reason="r", seen_version=run.version)


def test_a_fork_copies_the_ledger_up_to_a_step_and_never_resends_copied_effects(
    execute, people, enqueued
) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    fork = transitions.run_fork(
        run_id=run.run_id,
        step_id="refund",
        by=people.alice,
        reason="redo the email",
        confirm_resend=2,  # the email and the team notification are sent again
    )
    assert (fork.parent_id, fork.parent_kind, fork.forked_from_step_id) == (
        run.run_id,
        "fork",
        "refund",
    )
    assert (fork.status, fork.inputs) == ("queued", run.inputs)
    copied = list(Step.objects.filter(run=fork).order_by("seq"))
    assert [s.step_id for s in copied] == ["fetch_invoice", "decided_at", "decide", "refund"]
    assert copied[-1].next_step_id is None
    assert copied[-1].effect_key == step_of(run, "refund").effect_key  # the original's key
    assert enqueued.ids == [fork.run_id]
    assert sorted(AuditEvent.objects.values_list("run_id", flat=True)) == sorted(
        [run.run_id, fork.run_id]
    )

    outcome = execute(fork.run_id)
    assert outcome.status == "succeeded"
    assert outcome.replayed == 4 and outcome.executed == 2
    assert ProviderCharge.objects.count() == 1  # the copied refund replayed
    assert (OutboxMessage.objects.count(), Notification.objects.count()) == (2, 2)
    assert step_of(fork, "email_customer").effect_key == f"{fork.run_id}:email_customer"


def test_a_fork_needs_settled_steps_on_the_recorded_path(execute, crash_at, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("email.after_effect")
    execute(run.run_id, crash_expected=True)
    with pytest.raises(transitions.NotAllowed, match="not succeeded on the way: email_customer"):
        transitions.run_fork(
            run_id=run.run_id, step_id="email_customer", by=people.alice, reason="r"
        )
    with pytest.raises(transitions.NotAllowed, match="has no step 'nope'"):
        transitions.run_fork(run_id=run.run_id, step_id="nope", by=people.alice, reason="r")
    assert Run.objects.count() == 1 and not AuditEvent.objects.exists()


def test_bulk_previews_each_run_then_reports_each_outcome(execute, budget_stopped, people):
    failed = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_missing"})
    execute(failed.run_id)
    done = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1003"})
    execute(done.run_id)
    moved = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_missing"})
    execute(moved.run_id)
    ids = [budget_stopped.run_id, failed.run_id, done.run_id, moved.run_id]
    events = AuditEvent.objects.count()

    plan = resume.bulk_preview(action="resume", run_ids=ids)
    verdicts = {i.run_id: (i.allowed, i.will) for i in plan.items}
    assert verdicts[budget_stopped.run_id][0] is False
    assert "budget used up" in verdicts[budget_stopped.run_id][1]
    assert verdicts[failed.run_id] == (True, "queue for resume (0 of 5 resumes used)")
    assert verdicts[done.run_id] == (False, "skip: succeeded (only needs_attention or failed runs)")
    assert set(plan.targets) == {failed.run_id, moved.run_id}
    raised = resume.bulk_preview(action="resume", run_ids=ids, max_resumes=5)
    assert dict((i.run_id, i.allowed) for i in raised.items)[budget_stopped.run_id] is True
    by_filter = resume.bulk_preview(action="retry", flt=selectors.RunFilter(status="failed"))
    assert {i.run_id for i in by_filter.items} == {failed.run_id, moved.run_id}
    assert AuditEvent.objects.count() == events  # a preview writes nothing

    # Someone retries one of them between the preview and the confirmation.
    resume.run_retry(
        run_id=moved.run_id, by=people.bob, reason="mine", seen_version=plan.targets[moved.run_id]
    )
    outcomes = resume.bulk_apply(
        action="resume",
        targets={**plan.targets, "run_gone": None},
        by=people.alice,
        reason="provider fixed",
    )
    result = {o.run_id: (o.ok, o.status) for o in outcomes}
    assert result == {
        failed.run_id: (True, "queued"),
        moved.run_id: (False, "queued"),
        "run_gone": (False, ""),
    }
    assert "changed since you opened it" in outcomes[1].message
    assert run_row(done)[0] == "succeeded" and run_row(budget_stopped)[0] == "needs_attention"


def test_an_edited_result_makes_its_dependents_stale_and_is_audited(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    Run.objects.filter(pk=run.pk).update(status="failed")  # stopped, so an admin may edit
    fetch = step_of(run, "fetch_invoice")
    edited = dict(fetch.result, customer="cus_ada_2")
    with pytest.raises(transitions.InvalidInput, match="not editable: input_hash"):
        transitions.step_admin_edit(
            step=fetch,
            by=people.alice,
            reason="r",
            changes={"input_hash": "0"},
            seen_version=fetch.version,
        )
    transitions.step_admin_edit(
        step=fetch,
        by=people.alice,
        reason="customer was merged",
        changes={"result": edited},
        seen_version=fetch.version,
    )
    row = step_of(run, "fetch_invoice")
    assert (row.result, row.version, row.settled_by) == (
        edited,
        fetch.version + 1,
        "admin edit by alice",
    )
    event = AuditEvent.objects.get(action="step_admin_edit")
    assert event.before == {"result": fetch.result} and event.after["result"] == edited
    assert [step for step, _version in event.after["downstream"]] == [
        "decided_at",
        "decide",
        "refund",
        "email_customer",
        "notify",
    ]
    marks = selectors.edited_upstream(run_id=run.run_id)
    assert set(marks) == {"decided_at", "decide", "refund", "email_customer", "notify"}
    assert marks["decide"].edited_step_id == "fetch_invoice"
    # The replayed edit changes the model's prompt: the preview and the resume say stale.
    preview = preview_resume(run_id=run.run_id)
    assert preview.stale_ids == {"decide", "refund", "email_customer"}  # built from the customer
    with pytest.raises(transitions.WouldStopAgain, match="step decide is stale"):
        resume.run_resume(run_id=run.run_id, by=people.alice, reason="check", seen_version=None)
    resume.run_resume(
        run_id=run.run_id, by=people.alice, reason="check", seen_version=None, anyway=True
    )
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "stale",
        "decide",
    )
    assert ProviderCharge.objects.count() == 1


def test_admin_edits_of_a_run_are_checked(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    with pytest.raises(transitions.InvalidInput, match="only a worker's lease"):
        transitions.run_admin_edit(
            run=run,
            by=people.alice,
            reason="r",
            changes={"status": "running"},
            seen_version=run.version,
        )
    transitions.run_admin_edit(
        run=run,
        by=people.alice,
        reason="bigger budget",
        changes={"max_resumes": 20},
        seen_version=run.version,
    )
    assert run_row(run) == ("queued", run.version + 1, 20)
    with pytest.raises(transitions.Conflict):
        transitions.run_admin_edit(
            run=run,
            by=people.alice,
            reason="r",
            changes={"max_resumes": 30},
            seen_version=run.version,
        )
    event = AuditEvent.objects.get()
    assert (event.before, event.after) == ({"max_resumes": 5}, {"max_resumes": 20})


def test_audit_events_cannot_be_changed_or_deleted(people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    transitions.run_cancel(run_id=run.run_id, by=people.alice, reason="r", seen_version=run.version)
    event = AuditEvent.objects.get()
    event.reason = "nothing to see"
    with pytest.raises(AppendOnly):
        event.save()
    with pytest.raises(AppendOnly):
        event.delete()
    with pytest.raises(AppendOnly):
        AuditEvent.objects.filter(pk=event.pk).update(reason="x")
    with pytest.raises(AppendOnly):
        AuditEvent.objects.all().delete()
    with (
        pytest.raises(Exception, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute("UPDATE ledger_auditevent SET reason = 'x'")
    assert AuditEvent.objects.get().reason == "r"
