"""An execution whose run is cancelled under it ends ``cancelled``, saying who cancelled and why,
on the API's and the run page's execution history (not ``lease_lost`` with the run id)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from harness import faults
from harness.unannounced import start_unannounced
from ledger import transitions
from ledger.models import Execution, ExecutionEnding, Run
from runs.api import tokens
from tests.support.dashboard_runs import restore_roles, signed_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_hooks() -> Iterator[None]:
    yield
    faults.clear_hooks()


def test_an_execution_cancelled_under_its_worker_ends_cancelled_with_who_and_why(
    execute: Callable[..., Any], client: Client, no_hooks: None
) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})

    def cancel_now() -> None:  # a person cancels while the worker is between two steps
        transitions.run_cancel(
            run_id=run.run_id, by="api:shop", reason="the customer withdrew", seen_version=None
        )

    faults.set_hook("notify.after_effect", cancel_now)
    assert execute(run.run_id) is None  # the worker found its lease revoked and stopped
    run.refresh_from_db()
    assert run.status == "cancelled"
    row = Execution.objects.get(run_id=run.run_id)
    assert row.ending == ExecutionEnding.CANCELLED and row.ended_at is not None
    assert row.error == "cancelled by api:shop: the customer withdrew"
    assert row.replayed == 0 and row.executed >= 2  # the worker's counts are kept

    token = tokens.token_create(name="viewer", role="viewer").secret
    answer = client.get(
        f"/api/v1/runs/{run.run_id}/executions", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    (listed,) = answer.json()
    assert (listed["ending"], listed["ending_label"]) == ("cancelled", "cancelled")
    assert listed["error"] == "cancelled by api:shop: the customer withdrew"
    restore_roles()
    page = signed_in("viewer").get(f"/runs/{run.run_id}/").content.decode()
    assert "ex-cancelled" in page and "cancelled by api:shop: the customer withdrew" in page
    assert "lease_lost" not in page and "lease lost" not in page


def test_a_cancel_ends_the_open_execution_of_a_worker_that_never_comes_back(
    execute: Callable[..., Any], crash_at: Callable[..., None]
) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    crash_at("notify.after_effect")
    execute(run.run_id, crash_expected=True)  # the worker died mid-run: its execution is open
    assert Execution.objects.get(run_id=run.run_id).ending == ExecutionEnding.RUNNING
    transitions.run_cancel(run_id=run.run_id, by="alice", reason="give up", seen_version=None)
    row = Execution.objects.get(run_id=run.run_id)
    assert (row.ending, row.error) == (ExecutionEnding.CANCELLED, "cancelled by alice: give up")
    assert row.ended_at is not None and Run.objects.get(pk=run.run_id).status == "cancelled"


def test_a_lease_taken_by_another_worker_ends_lease_lost_saying_what_happened(
    execute: Callable[..., Any], clock: Any, no_hooks: None
) -> None:
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})

    def taken() -> None:  # the lease expires and another worker claims the run
        clock.advance(3600)
        assert transitions.lease_claim(run_id=run.run_id, owner="worker-2", clock=clock)

    faults.set_hook("notify.after_effect", taken)
    assert execute(run.run_id) is None
    first = Execution.objects.get(run_id=run.run_id, number=1)
    assert first.ending == ExecutionEnding.LEASE_LOST
    assert "worker-2" in first.error and run.run_id != first.error
