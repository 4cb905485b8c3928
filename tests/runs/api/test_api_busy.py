"""An operator's action while another writer holds the run's row (as a resumed run's worker
does while it commits a step) is answered promptly as busy — 409 ``busy`` with ``Retry-After``
from the API, the same refusal in the dashboard — with nothing written; sent again after the
row is released, it succeeds. On a real PostgreSQL, the row held from another connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client

from harness.unannounced import start_unannounced
from ledger.models import AuditEvent, Gate, Run
from ledger.processes.execute import run_execute
from tests.support.api_rows import ledger_rows

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="row locks of PostgreSQL"),
]


@contextmanager
def row_held(run_id: str, *, mode: str = "FOR SHARE") -> Iterator[None]:
    """The run's row locked from a connection of its own until the block ends: FOR SHARE, as
    a worker's fenced step write holds it (``FOR UPDATE``: as another operator's action)."""
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"] or None,
        host=db["HOST"] or None, port=db["PORT"] or None,
    ) as other:  # fmt: skip
        other.execute(f"SELECT 1 FROM ledger_run WHERE run_id = %s {mode}", [run_id])
        yield
        other.rollback()


@pytest.fixture(autouse=True)
def _no_endless_wait() -> Iterator[None]:
    """Without the action's own bound a request would wait for the row until the database's
    statement_timeout ends it (the 503 this guards against): give it one, generous, so a
    regression fails instead of hanging."""
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '30s'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 0")


def at_gate() -> tuple[Run, Gate]:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    outcome = run_execute(run_id=run.run_id, worker="worker-1", heartbeat=False)
    assert outcome is not None
    assert (outcome.status, outcome.reason) == ("needs_attention", "approval"), outcome
    return Run.objects.get(pk=run.run_id), Gate.objects.get(run_id=run.run_id)


def test_an_approval_while_the_run_row_is_held_is_busy_then_succeeds_when_sent_again(
    caller: Any,
) -> None:
    run, gate = at_gate()
    alice = caller("approver", user="alice")
    path = f"/api/v1/approvals/{gate.pk}/approve"
    before = ledger_rows()
    with row_held(run.run_id):
        answer = alice.post(path, {"reason": "checked"})
        assert answer.status_code == 409, answer.content
        assert answer["Content-Type"] == "application/problem+json"
        assert int(answer["Retry-After"]) >= 1
        problem = answer.json()
        assert problem["type"].endswith("/busy"), problem
        assert "busy" in problem["detail"] and "nothing was changed" in problem["detail"]
        assert ledger_rows() == before  # nothing half-written
        assert Gate.objects.get(pk=gate.pk).status == "waiting"
        assert not AuditEvent.objects.filter(action="gate_approve").exists()

    again = alice.post(path, {"reason": "checked"})
    assert again.status_code == 200, again.content
    assert again.json()["status"] == "approved" and again.json()["run_status"] == "queued"
    assert list(AuditEvent.objects.filter(action="gate_approve").values_list("actor")) == [
        ("alice",)
    ]


def test_a_cancel_while_another_action_holds_the_run_is_busy_and_the_client_says_so(
    caller: Any,
) -> None:
    from ledger import client as rl

    run, _ = at_gate()
    ops = caller("operator", name="ops")
    before = ledger_rows()
    with row_held(run.run_id, mode="FOR UPDATE"):
        answer = ops.post(f"/api/v1/runs/{run.run_id}/cancel", {"reason": "not needed"})
        assert answer.status_code == 409, answer.content
        assert answer.json()["type"].endswith("/busy") and answer["Retry-After"]
        assert ledger_rows() == before
    # The client's exception for it is a Conflict (as before) that says when to try again.
    import httpx

    error = rl._error(
        httpx.Response(409, json=answer.json(), headers={"Retry-After": answer["Retry-After"]})
    )
    assert isinstance(error, rl.Busy) and isinstance(error, rl.Conflict)
    assert error.retry_after == float(answer["Retry-After"])

    done = ops.post(f"/api/v1/runs/{run.run_id}/cancel", {"reason": "not needed"})
    assert done.status_code == 200, done.content
    assert Run.objects.get(pk=run.run_id).status == "cancelled"


def test_the_dashboard_says_busy_and_try_again_and_its_retry_approves(django_user_model) -> None:
    from tests.support.dashboard_runs import restore_roles, user_in

    restore_roles()
    run, gate = at_gate()
    browser = Client()
    browser.force_login(user_in("approver"))
    path = f"/approvals/{gate.pk}/approve/"
    before = ledger_rows()
    with row_held(run.run_id):
        page = browser.post(path, {"reason": "checked"})
        assert page.status_code == 409
        text = page.content.decode()
        assert "is busy" in text and "try again in a few seconds" in text
        assert ledger_rows() == before
    page = browser.post(path, {"reason": "checked"})
    assert page.status_code == 302
    assert Gate.objects.get(pk=gate.pk).status == "approved"


def test_an_approval_asked_while_the_worker_writes_the_gated_intent_is_refused_not_deadlocked(
    caller: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker, resumed after the approval, is inside the transaction of the effect's
    intent when a second approval arrives (from another connection): the worker has locked
    nothing yet (it takes the run row, then the gate, as the approver does), so the approval
    is answered at once — the gate was approved already — and the effect is sent once."""
    import threading

    from django.db import connections

    from ledger import transitions
    from ledger.examples.models import ProviderCharge
    from ledger.models import StepStatus

    run, gate = at_gate()
    alice, bob = caller("approver", user="alice"), caller("approver", user="bob")
    assert alice.post(f"/api/v1/approvals/{gate.pk}/approve", {}).status_code == 200
    answers: list[Any] = []

    def second_approval() -> None:
        try:
            with connection.cursor() as cursor:  # this thread's own connection
                cursor.execute("SET statement_timeout = '30s'")
            answers.append(bob.post(f"/api/v1/approvals/{gate.pk}/approve", {}))
        finally:
            connections.close_all()

    real = transitions.step_write

    def intent_then_ask(write: Any) -> Any:
        if write.step_id == "pay_out" and write.status == StepStatus.STARTED and not answers:
            asking = threading.Thread(target=second_approval)
            asking.start()
            asking.join(timeout=120)
            assert not asking.is_alive()
        return real(write)

    monkeypatch.setattr(transitions, "step_write", intent_then_ask)
    outcome = run_execute(run_id=run.run_id, worker="worker-1", heartbeat=False)
    assert outcome is not None and outcome.status == "succeeded", outcome
    [answer] = answers
    assert answer.status_code == 409, answer.content
    assert answer.json()["type"].endswith("/conflict"), answer.json()  # already approved
    assert ProviderCharge.objects.count() == 1
    assert Gate.objects.get(pk=gate.pk).status == "used"
