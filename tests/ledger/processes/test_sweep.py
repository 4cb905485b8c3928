"""The lease sweep's ledger functions: re-queue dead workers' runs, once, and fence the dead."""

from __future__ import annotations

import pytest
from django.conf import settings

from ledger import selectors, transitions
from ledger.errors import LeaseLost
from ledger.models import Run
from ledger.processes import sweep
from tests.support.ledger_writes import read_write

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def start(clock) -> Run:
    return transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}, clock=clock)


def claimed(clock, owner: str = "worker-a") -> tuple[Run, str]:
    run = start(clock)
    token = transitions.lease_claim(run_id=run.run_id, owner=owner, clock=clock)
    assert token
    return run, token


def test_a_run_whose_lease_expired_is_requeued_once_and_its_lease_cleared(clock) -> None:
    run, _ = claimed(clock)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    assert sweep.runs_sweep(clock=clock) == [run.run_id]
    run.refresh_from_db()
    assert (run.status, run.lease_token, run.lease_owner) == ("queued", None, "")
    assert "worker-a" in run.detail
    assert sweep.runs_sweep(clock=clock) == []


def test_a_live_lease_is_left_alone(clock) -> None:
    run, token = claimed(clock)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS - 1)
    assert sweep.runs_sweep(clock=clock) == []
    run.refresh_from_db()
    assert (run.status, run.lease_token) == ("running", token)


def test_two_sweepers_that_saw_the_same_expired_lease_requeue_it_once(clock) -> None:
    run, _ = claimed(clock)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    first = selectors.runs_with_expired_leases(now=clock())
    second = selectors.runs_with_expired_leases(now=clock())
    assert [lease.run_id for lease in first] == [run.run_id]
    won = [transitions.run_requeue_expired(lease=lease, clock=clock) for lease in first + second]
    assert won == [True, False]


def test_a_lease_renewed_after_the_sweep_looked_is_not_requeued(clock) -> None:
    run, token = claimed(clock)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    [lease] = selectors.runs_with_expired_leases(now=clock())
    assert transitions.lease_renew(run_id=run.run_id, token=token, clock=clock)
    assert not transitions.run_requeue_expired(lease=lease, clock=clock)
    run.refresh_from_db()
    assert (run.status, run.lease_token) == ("running", token)


def test_a_worker_whose_run_was_requeued_can_write_nothing(clock) -> None:
    run, token = claimed(clock)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    sweep.runs_sweep(clock=clock)
    assert not transitions.lease_renew(run_id=run.run_id, token=token, clock=clock)
    write = read_write(run_id=run.run_id, token=token, step_id="late", now=clock(), result_json="1")
    with pytest.raises(LeaseLost):
        transitions.step_write(write)
    assert not run.steps.exists()
    assert transitions.lease_claim(run_id=run.run_id, owner="worker-b", clock=clock)


def test_a_queued_run_whose_message_was_lost_is_enqueued_again_once_per_wait(clock) -> None:
    run = start(clock)
    assert sweep.runs_sweep(lost_after=60, clock=clock) == []
    clock.advance(61)
    assert sweep.runs_sweep(lost_after=60, clock=clock) == [run.run_id]
    assert sweep.runs_sweep(lost_after=60, clock=clock) == []
    clock.advance(61)
    assert sweep.runs_sweep(lost_after=60, clock=clock) == [run.run_id]
    run.refresh_from_db()
    assert run.status == "queued"


def test_finished_cancelled_and_blocked_runs_are_never_swept(clock, execute) -> None:
    done = start(clock)
    execute(done.run_id)
    cancelled, _ = claimed(clock)
    transitions.run_cancel(
        by="test", reason="cancel", seen_version=None, run_id=cancelled.run_id, clock=clock
    )
    blocked, _ = claimed(clock)
    Run.objects.filter(pk=blocked.run_id).update(status="needs_attention", reason="stale")
    clock.advance(3600)
    assert sweep.runs_sweep(lost_after=60, clock=clock) == []
    statuses = dict(Run.objects.values_list("run_id", "status"))
    assert statuses == {
        done.run_id: "succeeded",
        cancelled.run_id: "cancelled",
        blocked.run_id: "needs_attention",
    }
