"""No path spends a resume on a run that will block again, and no fork or clean run sends an
effect again unconfirmed (issue 23, item 3): the transitions themselves refuse, so the
dashboard, the command line and bulk actions all do."""

from __future__ import annotations

import pytest

from ledger import selectors, transitions
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import AuditEvent, Run, Step
from ledger.processes import resume

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def renewal_blocked(execute, crash_at) -> Run:
    """A renewal whose card charge (no lookup) crashed after charging: only a person can say."""
    run = transitions.run_start(agent="renewal", inputs={"customer": "cus_hopper"})
    crash_at("gateway.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "reconciliation",
        "charge",
    )
    return Run.objects.get(pk=run.run_id)


def state(run_id: str) -> tuple:
    run = Run.objects.get(pk=run_id)
    return (run.status, run.version, run.resume_count, run.max_resumes)


def test_resume_of_a_run_that_would_block_again_is_refused_and_spends_nothing(
    renewal_blocked, people, enqueued
) -> None:
    run_id = renewal_blocked.run_id
    before, events = state(run_id), AuditEvent.objects.count()
    with pytest.raises(transitions.WouldStopAgain, match="charge has no read path") as refused:
        resume.run_resume(run_id=run_id, by=people.alice, reason="go", seen_version=None)
    assert "no resume spent" in str(refused.value)
    with pytest.raises(transitions.WouldStopAgain):
        resume.run_resume(
            run_id=run_id, by=people.alice, reason="go", seen_version=None, max_resumes=9
        )
    assert state(run_id) == before and AuditEvent.objects.count() == events
    assert enqueued.ids == []

    done = resume.run_resume(
        run_id=run_id, by=people.alice, reason="go", seen_version=None, anyway=True
    )
    assert done.status == "queued" and enqueued.ids == [run_id]


def test_the_transition_refuses_on_the_verdict_its_caller_hands_it(
    renewal_blocked, people, enqueued
) -> None:
    """The transition runs no dry replay: it acts on the verdict it is given (a sentence
    refuses, "" admits), and without one it warns that nothing was checked."""
    run_id = renewal_blocked.run_id
    before, events = state(run_id), AuditEvent.objects.count()
    with pytest.raises(transitions.WouldStopAgain, match="told so"):
        transitions.run_resume(
            run_id=run_id, by=people.alice, reason="go", seen_version=None, stops_again="told so"
        )
    assert state(run_id) == before and AuditEvent.objects.count() == events
    assert enqueued.ids == []

    with pytest.warns(DeprecationWarning, match="processes.resume.run_resume"):
        done = transitions.run_resume(
            run_id=run_id, by=people.alice, reason="go", seen_version=None
        )
    assert done.status == "queued" and enqueued.ids == [run_id]


def test_bulk_resume_of_a_run_that_would_block_again_is_refused_with_the_reason(
    execute, renewal_blocked, people, enqueued
) -> None:
    failed = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_missing"})
    execute(failed.run_id)
    ids = [renewal_blocked.run_id, failed.run_id]
    before = state(renewal_blocked.run_id)

    plan = resume.bulk_preview(action="resume", run_ids=ids)
    verdicts = {i.run_id: (i.allowed, i.will) for i in plan.items}
    assert verdicts[renewal_blocked.run_id][0] is False
    assert "would stop again at once, no resume spent" in verdicts[renewal_blocked.run_id][1]
    assert "charge has no read path" in verdicts[renewal_blocked.run_id][1]
    assert verdicts[failed.run_id] == (True, "queue for resume (0 of 5 resumes used)")
    assert set(plan.targets) == {failed.run_id}

    # A target the preview would not list (a stale page, a hand-written request) is refused
    # by the transition itself, with the same reason.
    events = AuditEvent.objects.count()
    outcomes = resume.bulk_apply(
        action="resume",
        targets={renewal_blocked.run_id: before[1], failed.run_id: None},
        by=people.alice,
        reason="sweep",
    )
    by_run = {o.run_id: o for o in outcomes}
    refused = by_run[renewal_blocked.run_id]
    assert refused.ok is False and refused.status == "needs_attention"
    assert "no resume spent" in refused.message and "charge has no read path" in refused.message
    assert state(renewal_blocked.run_id) == before
    assert by_run[failed.run_id].ok is True
    assert AuditEvent.objects.count() == events + 1  # the failed run's resume only
    assert enqueued.ids == [failed.run_id]


def test_a_fork_that_would_send_effects_again_needs_their_number_and_audits_them(
    execute, people, enqueued
) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert execute(run.run_id).status == "succeeded"
    kept = selectors.fork_kept(run_id=run.run_id, step_id="decide")
    sent = selectors.effects_sent_again(run_id=run.run_id, kept=kept)
    assert [(e.step_id, e.tool, e.old_status) for e in sent] == [
        ("refund", "refund_charge", "succeeded"),
        ("email_customer", "send_email", "succeeded"),
        ("notify", "notify_team", "succeeded"),
    ]
    keys = {s.step_id: s.effect_key for s in Step.objects.filter(run=run)}
    assert [e.old_key for e in sent] == [keys["refund"], keys["email_customer"], keys["notify"]]

    for confirm in (None, 2, 4):
        with pytest.raises(transitions.NotAllowed, match="would send 3 effects again") as exc:
            transitions.run_fork(
                run_id=run.run_id,
                step_id="decide",
                by=people.alice,
                reason="r",
                confirm_resend=confirm,
            )
        assert keys["refund"] in str(exc.value)
    assert Run.objects.count() == 1 and not AuditEvent.objects.exists()

    fork = transitions.run_fork(
        run_id=run.run_id, step_id="decide", by=people.alice, reason="r", confirm_resend=3
    )
    audits = AuditEvent.objects.filter(action="run_fork")
    assert audits.count() == 2
    for audit in audits:
        assert audit.after["sent_again"] == [e.as_audit() for e in sent]
    assert execute(fork.run_id).status == "succeeded"
    assert ProviderCharge.objects.count() == 2  # what the confirmation said: sent again


def test_a_fork_after_every_effect_needs_no_confirmation(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    last = Step.objects.filter(run=run).order_by("-seq").values_list("step_id", flat=True)[0]
    kept = selectors.fork_kept(run_id=run.run_id, step_id=last)
    assert selectors.effects_sent_again(run_id=run.run_id, kept=kept) == []
    fork = transitions.run_fork(run_id=run.run_id, step_id=last, by=people.alice, reason="r")
    audit = AuditEvent.objects.get(run_id=fork.run_id, action="run_fork")
    assert audit.after["sent_again"] == []
    assert execute(fork.run_id).status == "succeeded"
    assert ProviderCharge.objects.count() == 1
    assert (OutboxMessage.objects.count(), Notification.objects.count()) == (1, 1)


def test_a_clean_run_of_a_run_with_sent_effects_needs_their_number(execute, people) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    sent = selectors.effects_sent_again(run_id=run.run_id)
    assert [e.step_id for e in sent] == ["refund", "email_customer", "notify"]
    with pytest.raises(transitions.NotAllowed, match="this clean run would send 3 effects"):
        transitions.run_start_clean(
            run_id=run.run_id, by=people.alice, reason="r", seen_version=None
        )
    assert Run.objects.count() == 1 and not AuditEvent.objects.exists()
    new = transitions.run_start_clean(
        run_id=run.run_id, by=people.alice, reason="r", seen_version=None, confirm_resend=3
    )
    audit = AuditEvent.objects.get(run_id=new.run_id, action="run_clean")
    assert [e["step_id"] for e in audit.after["sent_again"]] == [
        "refund",
        "email_customer",
        "notify",
    ]
