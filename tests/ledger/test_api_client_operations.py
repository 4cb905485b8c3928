"""ledger.client's operations beyond runs, against the real API in this process (httpx's WSGI
transport into Django): approval gates with a person's token, pauses and their lift, a run's
executions and failed attempts, webhook subscriptions, and the re-exported ``verify_webhook``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from harness.unannounced import start_unannounced
from ledger import client as rl
from ledger import webhooks
from ledger.examples.models import ProviderCharge
from ledger.models import Gate, WebhookSubscription
from ledger.processes.execute import run_execute
from runs.api import tokens
from runs.dashboard.roles import user_set_role

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(secret: str) -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", secret, transport=transport, backoff=0.01)


@pytest.fixture
def ops() -> rl.Client:
    from tests.support.dashboard_runs import restore_roles

    restore_roles()
    return client_for(tokens.token_create(name="ops", role="operator").secret)


def execute(run_id: str) -> Any:
    return run_execute(run_id=run_id, worker="worker-1", heartbeat=False)


def test_verify_webhook_verifies_what_the_ledger_signs() -> None:
    # The client distribution keeps its own copy (it cannot import the server): same answers.
    assert rl.WebhookVerificationError is webhooks.WebhookVerificationError
    secret = webhooks.new_secret()
    at = datetime.now(tz=UTC)
    headers = webhooks.signed_headers(secret=secret, msg_id="msg_1", at=at, body='{"a": 1}')
    assert rl.verify_webhook(b'{"a": 1}', headers, secret) == {"a": 1}
    with pytest.raises(rl.WebhookVerificationError):
        rl.verify_webhook(b'{"a": 2}', headers, secret)
    for broken in ({}, {**headers, "webhook-timestamp": "x"}, {**headers, "webhook-id": "m"}):
        with pytest.raises(rl.WebhookVerificationError) as theirs:
            rl.verify_webhook(b'{"a": 1}', broken, secret)
        with pytest.raises(webhooks.WebhookVerificationError) as ours:
            webhooks.verify_webhook(b'{"a": 1}', broken, secret)
        assert str(theirs.value) == str(ours.value)


def test_approvals_through_the_client(ops: rl.Client) -> None:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    assert execute(run.run_id).reason == "approval"
    [gate] = list(ops.approvals())
    assert isinstance(gate, rl.Gate) and gate.digest == Gate.objects.get().digest
    assert ops.approval(gate.id).arguments == gate.arguments
    assert isinstance(gate.expires_at, datetime)
    with pytest.raises(rl.Forbidden):
        ops.approve(gate.id)
    alice = User.objects.create_user(username="alice")
    user_set_role(user=alice, role="approver")
    person = client_for(tokens.token_create(name="alice", role="approver", user=alice).secret)
    assert person.approve(gate.id, "fine").status == "approved"
    with pytest.raises(rl.Conflict, match="already approved"):
        person.reject(gate.id, "too late")
    assert execute(run.run_id).status == "succeeded"
    assert ProviderCharge.objects.count() == 1


def test_pauses_executions_and_webhooks_through_the_client(ops: rl.Client) -> None:
    pause = ops.pause("agent", "refund", "provider down")
    assert isinstance(pause, rl.Pause) and pause.active and pause.held == 0
    with pytest.raises(rl.Conflict, match="already paused"):
        ops.pause("agent", "refund", "again")
    with pytest.raises(rl.InvalidRequest, match="no tool named"):
        ops.pause("tool", "nope", "x")
    run = ops.start("refund", {"invoice_id": "inv_1001"})
    assert execute(run.run_id).status == "paused"
    assert ops.get(run.run_id).status == "paused"
    held = ops.get_pause(pause.id).held
    assert held == 1 and [p.id for p in ops.pauses()] == [pause.id]
    with pytest.raises(rl.Conflict, match="not the 0 you were shown"):
        ops.lift(pause.id, "back", expected=0)
    lifted = ops.lift(pause.id, "back", expected=held)
    assert (lifted.active, lifted.requeued) == (False, 1) and ops.pauses() == []
    assert execute(run.run_id).status == "succeeded"
    runs = ops.executions(run.run_id)
    assert [(e.number, e.ending) for e in runs] == [(1, "paused"), (2, "finished")]
    assert isinstance(runs[0].started_at, datetime)
    assert all(s.failures == [] for s in ops.steps(run.run_id))

    hook = ops.subscribe("https://app.example.com/hooks", agent="refund", events=["run.failed"])
    assert hook.secret == WebhookSubscription.objects.get().secret
    assert [(w.id, w.secret) for w in ops.webhooks(agent="refund")] == [(hook.id, None)]
    with pytest.raises(rl.InvalidRequest, match="not an http"):
        ops.subscribe("mailto:x@example.com", agent="refund")
    assert ops.unsubscribe(hook.id).removed_at is not None
    with pytest.raises(rl.Conflict, match="already removed"):
        ops.unsubscribe(hook.id)
    assert ops.webhooks() == [] and len(ops.webhooks(removed=True)) == 1


def test_schedules_through_the_client(ops: rl.Client) -> None:
    from datetime import timedelta

    from ledger.processes.schedules import schedules_tick

    made = ops.add_schedule(
        "nightly", "refund", {"invoice_id": "inv_1001"}, cron="0 3 * * *",
        timezone="Europe/Paris", missed="once", priority=2, description="the refunds",
    )  # fmt: skip
    assert isinstance(made, rl.Schedule) and made.id.startswith("sch_")
    assert (made.cron, made.interval, made.missed, made.priority) == ("0 3 * * *", None, "once", 2)
    assert isinstance(made.next_at, datetime)
    with pytest.raises(rl.Conflict, match="exists"):
        ops.add_schedule("nightly", "refund", {"invoice_id": "inv_1001"}, interval=60)
    with pytest.raises(rl.InvalidRequest, match="interval: 0 s"):
        ops.add_schedule("zero", "refund", {"invoice_id": "inv_1001"}, interval=0)
    with pytest.raises(rl.InvalidRequest, match="needs inputs invoice_id"):
        ops.add_schedule("empty", "refund", {}, interval=60)
    assert [s.name for s in ops.schedules()] == ["nightly"]
    assert ops.pause_schedule("nightly", "freeze").paused is True
    assert ops.resume_schedule(made.id).next_at is not None
    (run_id,) = schedules_tick(clock=lambda: made.next_at + timedelta(seconds=1))
    assert ops.get(run_id).schedule == made.id
    assert [r.run_id for r in ops.runs(schedule=made.id)] == [run_id]
    assert ops.get_schedule("nightly").last_run_id == run_id
    assert ops.remove_schedule("nightly").removed is True
    assert ops.schedules() == [] and [s.id for s in ops.schedules(removed=True)] == [made.id]
    with pytest.raises(rl.NotFound):
        ops.get_schedule("nightly")
