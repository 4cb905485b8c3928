"""Stale checkpoints settled by a person: accept the stored result, or re-execute from a step.

The chain agent is a → b → pay (an effect through the provider) → c → d. Changing its salt
makes b's inputs hash differently (stale); changing its factor changes b's result.
"""

from __future__ import annotations

import pytest

from ledger import transitions
from ledger.examples import agents as examples
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import AuditEvent, Run
from ledger.processes.preview import preview_resume, stale_entry
from tests.support.operator_agents import CHAIN, step_of, stopped_stale

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stale_chain(execute, crash_at) -> Run:
    return stopped_stale(execute, crash_at)


def test_accepting_a_stale_result_records_todays_inputs_and_the_resume_goes_on(
    execute, stale_chain, people, enqueued
) -> None:
    run = stale_chain
    b = step_of(run, "b")
    today = next(s for s in preview_resume(run_id=run.run_id).steps if s.step_id == "b")
    accepted = transitions.step_accept_stale(
        step=b,
        today=stale_entry(b),
        by=people.alice,
        reason="the salt is cosmetic",
        seen_version=b.version,
    )
    assert accepted.input_hash == today.current_hash != b.input_hash
    assert accepted.inputs == {"v": 21, "salt": "v2"}
    assert accepted.result == b.result == 42  # the stored result is kept
    run.refresh_from_db()
    assert run.status == "queued" and enqueued.ids == [run.run_id]
    event = AuditEvent.objects.get(action="stale_accept")
    assert (event.actor, event.step_id) == ("alice", "b")
    assert event.before["inputs"]["salt"] == "v1" and event.after["inputs"]["salt"] == "v2"

    outcome = execute(run.run_id, worker="worker-3")
    assert outcome.status == "succeeded"
    assert outcome.result == {"y": 42, "z": 168}
    assert step_of(run, "b").attempt == 1  # replayed, not executed again
    assert ProviderCharge.objects.count() == 1


def test_accept_needs_a_step_the_dry_replay_shows_stale(stale_chain, people) -> None:
    a = step_of(stale_chain, "a")
    with pytest.raises(transitions.NotAllowed, match="not stale: a resume would replay it"):
        transitions.step_accept_stale(
            step=a, today=stale_entry(a), by=people.alice, reason="r", seen_version=a.version
        )
    b = step_of(stale_chain, "b")
    with pytest.raises(transitions.Conflict):
        transitions.step_accept_stale(
            step=b, today=stale_entry(b), by=people.alice, reason="r", seen_version=b.version - 1
        )
    assert step_of(stale_chain, "b").input_hash == b.input_hash
    assert not AuditEvent.objects.exists()


def test_re_executing_from_a_stale_step_keeps_the_effect_and_charges_once(
    execute, stale_chain, people, enqueued
) -> None:
    run = stale_chain
    pay_before = step_of(run, "pay")
    b = step_of(run, "b")
    reset = transitions.run_reexecute_from(
        run_id=run.run_id,
        step_id="b",
        by=people.alice,
        reason="recompute with the new salt",
        seen_version=b.version,
    )
    assert reset == ["b", "c"]  # d never ran; pay is an effect and is kept
    assert [step_of(run, s).status for s in ("a", "b", "pay", "c")] == [
        "succeeded",
        "pending",
        "succeeded",
        "pending",
    ]
    assert step_of(run, "pay").effect_key == pay_before.effect_key
    assert enqueued.ids == [run.run_id]
    event = AuditEvent.objects.get(action="reexecute_from")
    assert event.after["reset"] == ["b", "c"] and event.after["kept_effects"] == ["pay"]

    outcome = execute(run.run_id, worker="worker-3")
    assert outcome.status == "succeeded"
    assert outcome.result == {"y": 42, "z": 168}
    attempts = {s: step_of(run, s).attempt for s in ("a", "b", "pay", "c", "d")}
    assert attempts == {"a": 1, "b": 2, "pay": 1, "c": 2, "d": 1}
    assert ProviderCharge.objects.count() == 1


def test_re_executing_into_a_different_amount_stops_at_the_effect_instead_of_charging_again(
    execute, stale_chain, people
) -> None:
    run = stale_chain
    CHAIN["factor"] = 3  # b now computes 63, so the charge would be for another amount
    b = step_of(run, "b")
    transitions.run_reexecute_from(
        run_id=run.run_id, step_id="b", by=people.alice, reason="r", seen_version=b.version
    )
    outcome = execute(run.run_id, worker="worker-3")
    assert (outcome.status, outcome.reason, outcome.step_id) == ("needs_attention", "stale", "pay")
    assert step_of(run, "b").result == 63
    assert ProviderCharge.objects.count() == 1
    assert ProviderCharge.objects.get().amount_cents == 42


def test_re_execute_refuses_effects_and_runs_that_are_not_stopped(
    execute, stale_chain, people
) -> None:
    run = stale_chain
    pay = step_of(run, "pay")
    with pytest.raises(transitions.NotAllowed, match="effects are never re-executed"):
        transitions.run_reexecute_from(
            run_id=run.run_id, step_id="pay", by=people.alice, reason="r", seen_version=pay.version
        )
    with pytest.raises(transitions.NotAllowed, match="has no step 'zz'"):
        transitions.run_reexecute_from(
            run_id=run.run_id, step_id="zz", by=people.alice, reason="r", seen_version=1
        )
    done = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(done.run_id)
    decide = step_of(done, "decide")
    with pytest.raises(
        transitions.NotAllowed, match="is succeeded; re-execute from a step of a stopped"
    ):
        transitions.run_reexecute_from(
            run_id=done.run_id,
            step_id="decide",
            by=people.alice,
            reason="r",
            seen_version=decide.version,
        )
    assert step_of(done, "decide").version == decide.version
    assert not AuditEvent.objects.exists()


def test_a_changed_prompt_re_executed_from_the_model_step_refunds_and_emails_once(
    execute, crash_at, people, monkeypatch
) -> None:
    """The example refund agent: its prompt changes between the crash and the resume."""
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("email.before_effect")
    execute(run.run_id, crash_expected=True)
    monkeypatch.setattr(examples, "REFUND_PROMPT", examples.REFUND_PROMPT + " Be brief.")
    outcome = execute(run.run_id, worker="worker-2")
    assert (outcome.reason, outcome.step_id) == ("stale", "decide")
    decide = step_of(run, "decide")
    reset = transitions.run_reexecute_from(
        run_id=run.run_id,
        step_id="decide",
        by=people.alice,
        reason="prompt edited on purpose",
        seen_version=decide.version,
    )
    assert reset == ["decide"]
    outcome = execute(run.run_id, worker="worker-3")
    assert outcome.status == "succeeded"
    assert (ProviderCharge.objects.count(), OutboxMessage.objects.count()) == (1, 1)
    assert step_of(run, "decide").attempt == 2 and step_of(run, "refund").attempt == 1
