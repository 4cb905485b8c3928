"""Pauses in one process: what a pause holds, what it costs, and the refusals that write
nothing. The real-worker cases: tests/ledger/processes/test_pauses_and_executions_workers.py."""

from __future__ import annotations

import pytest

from harness.unannounced import start_unannounced
from ledger import selectors, transitions
from ledger.errors import Conflict, InvalidInput, NotAllowed
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Execution, Pause, Run

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def nothing_written(before: tuple[int, int]) -> bool:
    return (Pause.objects.count(), AuditEvent.objects.count()) == before


def counts() -> tuple[int, int]:
    return Pause.objects.count(), AuditEvent.objects.count()


@pytest.mark.parametrize(
    ("scope", "target", "message"),
    [
        ("tool", "no_such_tool", "no tool named 'no_such_tool'"),
        ("agent", "no_such_agent", "no agent named 'no_such_agent'"),
        ("run", "run_nope", "no run 'run_nope'"),
        ("galaxy", "refund", "a pause is of a tool, an agent or a run"),
        ("tool", "  ", "name the tool"),
    ],
)
def test_a_pause_of_something_unknown_is_refused_and_writes_nothing(scope, target, message) -> None:
    before = counts()
    with pytest.raises(InvalidInput, match=message):
        transitions.pause_create(scope=scope, target=target, by="ops", reason="why")
    assert nothing_written(before)


def test_a_pause_needs_a_reason_and_a_second_one_of_the_same_target_is_refused() -> None:
    with pytest.raises(InvalidInput, match="a reason is required"):
        transitions.pause_create(scope="tool", target="refund_charge", by="ops", reason=" ")
    first = transitions.pause_create(scope="tool", target="refund_charge", by="ops", reason="down")
    before = counts()
    with pytest.raises(Conflict, match="already paused"):
        transitions.pause_create(scope="tool", target="refund_charge", by="ops", reason="again")
    assert nothing_written(before)
    transitions.pause_lift(pause_id=first.pk, by="ops", reason="up")
    again = transitions.pause_create(scope="tool", target="refund_charge", by="ops", reason="2")
    assert again.pk != first.pk


def test_a_finished_run_cannot_be_paused(execute) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert execute(run.run_id).status == "succeeded"
    before = counts()
    with pytest.raises(NotAllowed, match="already succeeded"):
        transitions.pause_create(scope="run", target=run.run_id, by="ops", reason="late")
    assert nothing_written(before)


def test_a_paused_agent_holds_its_runs_at_the_claim_and_the_lift_is_free(execute) -> None:
    pause = transitions.pause_create(scope="agent", target="refund", by="ops", reason="audit")
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    outcome = execute(run.run_id)
    assert outcome.status == "paused" and (outcome.replayed, outcome.executed) == (0, 0)
    run.refresh_from_db()
    assert (run.status, run.pause_id, run.resume_count, run.lease_token) == (
        "paused",
        pause.pk,
        0,
        None,
    )
    assert execute(run.run_id) is None  # a paused run is not claimable: only the lift queues it
    with pytest.raises(Conflict, match="holds 1 runs now, not the 2"):
        transitions.pause_lift(pause_id=pause.pk, by="ops", reason="done", expected=2)
    assert Run.objects.get(pk=run.run_id).status == "paused"  # the refused lift wrote nothing
    transitions.pause_lift(pause_id=pause.pk, by="ops", reason="done", expected=1)
    assert execute(run.run_id).status == "succeeded"
    run.refresh_from_db()
    assert (run.executions, run.resume_count, run.resume_free) == (2, 0, False)
    with pytest.raises(NotAllowed, match="was lifted"):
        transitions.pause_lift(pause_id=pause.pk, by="ops", reason="twice")


def test_a_paused_run_is_held_even_at_a_budget_of_zero(execute) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"}, max_resumes=0)
    pause = transitions.pause_create(scope="run", target=run.run_id, by="ops", reason="look")
    assert execute(run.run_id).status == "paused"
    transitions.pause_lift(pause_id=pause.pk, by="ops", reason="go")
    # The execution after a pause costs nothing: a run with no resume budget left goes on.
    assert execute(run.run_id).status == "succeeded"
    assert ProviderCharge.objects.count() == 1


def test_a_tool_pause_does_not_hold_a_run_that_only_replays_the_tool(execute, crash_at) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("email.before_effect")
    execute(run.run_id, crash_expected=True)  # the refund is recorded; the email was not sent
    transitions.pause_create(scope="tool", target="refund_charge", by="ops", reason="down")
    # The refund step replays (it reaches nothing); the run goes on past it.
    assert execute(run.run_id, worker="worker-2").status == "succeeded"
    assert ProviderCharge.objects.count() == 1


def test_each_execution_is_recorded_with_its_counts(execute, crash_at) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("email.before_effect")
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id, worker="worker-2").status == "succeeded"
    rows = selectors.run_executions(run.run_id)
    # The first never recorded an end and the second took its lease over: shown as crashed.
    assert [(r.number, r.worker, r.ending) for r in rows] == [
        (1, "worker-1", "crashed"),
        (2, "worker-2", "finished"),
    ]
    assert Execution.objects.get(run_id=run.run_id, number=1).ending == "running"
    assert rows[1].replayed == 4 and rows[1].executed == 2 and rows[1].seconds is not None


def test_a_pause_with_an_expiry_is_lifted_by_the_sweep_then_and_audited(execute, clock) -> None:
    from datetime import timedelta

    from ledger.models import AuditAction
    from ledger.processes.sweep import runs_sweep

    before = counts()
    with pytest.raises(InvalidInput, match="in the future"):
        transitions.pause_create(
            scope="agent",
            target="refund",
            by="ops",
            reason="x",
            expires_at=clock() - timedelta(seconds=1),
            clock=clock,
        )
    assert nothing_written(before)
    pause = transitions.pause_create(
        scope="agent", target="refund", by="ops", reason="provider down for an hour",
        expires_at=clock() + timedelta(hours=1), clock=clock,
    )  # fmt: skip
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert execute(run.run_id).status == "paused"
    runs_sweep(clock=lambda: clock() + timedelta(minutes=59))
    assert Pause.objects.get(pk=pause.pk).lifted_at is None  # not yet
    runs_sweep(clock=lambda: clock() + timedelta(minutes=61))
    pause.refresh_from_db()
    assert (pause.lifted_by, pause.lift_reason, pause.requeued) == (
        "system:pause-expiry", "its expiry passed", 1)  # fmt: skip
    assert Run.objects.get(pk=run.run_id).status == "queued"
    lift = AuditEvent.objects.get(action=AuditAction.UNPAUSE)
    assert (lift.actor, lift.after["run_ids"]) == ("system:pause-expiry", [run.run_id])
    runs_sweep(clock=lambda: clock() + timedelta(minutes=62))  # lifted once
    assert AuditEvent.objects.filter(action=AuditAction.UNPAUSE).count() == 1
    assert execute(run.run_id).status == "succeeded"
