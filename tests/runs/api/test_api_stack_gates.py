"""Approval gates and per-run webhooks on a real stack on loopback (gunicorn, a Celery worker and
beat, this suite's PostgreSQL, Redis database 9), driven by ``ledger.client`` over HTTP: a gated
effect started through the API is approved through the API with a person's token and sent once;
a run started with its own webhook gets exactly one signed ``run.succeeded``."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from harness.api_stack import ApiStack
from harness.cluster import wait_for
from ledger import client as rl
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, DeliveryStatus, Gate, Notification, Run, Step
from runs.api import tokens
from runs.dashboard.roles import user_set_role
from tests.support.receivers import EventReceiver

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BROKER = "redis://127.0.0.1:6379/9"
WAIT = 180  # seconds any condition may take on a loaded machine before the test fails
ENV = {
    "RUNLEDGER_NOTIFY_EVERY_SECONDS": "1",
    "RUNLEDGER_NOTIFY_TIMEOUT_SECONDS": "2",
    "RUNLEDGER_NOTIFY_BACKOFF_SECONDS": "1",
}


def redis_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


pytestmark.append(
    pytest.mark.skipif("not redis_reachable()", reason="needs Redis on 127.0.0.1:6379")
)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[ApiStack]:
    with ApiStack(tmp_path, broker_url=BROKER, env=ENV) as running:
        yield running


def test_a_gated_effect_is_approved_through_the_api_by_a_person_and_sent_once(
    stack: ApiStack,
) -> None:
    from tests.support.dashboard_runs import restore_roles

    restore_roles()
    shop = tokens.token_create(name="shop", role="operator").secret
    alice = User.objects.create_user(username="alice")
    user_set_role(user=alice, role="approver")
    person = tokens.token_create(name="alice", role="approver", user=alice).secret
    stack.worker("w1")
    with rl.Client(stack.url, shop) as app, rl.Client(stack.url, person) as approver:
        run = app.start("payout", {"invoice_id": "inv_1003"}, idempotency_key="payout-1")
        stopped = app.wait(run.run_id, timeout=WAIT)
        assert (stopped.status, stopped.reason) == ("needs_attention", "approval"), stack.log("w1")
        assert ProviderCharge.objects.count() == 0  # nothing sent before the approval
        [gate] = list(app.approvals())
        assert (gate.run_id, gate.step_id, gate.status) == (run.run_id, "pay_out", "waiting")
        assert gate.digest == Gate.objects.get().digest and '"amount_cents"' in gate.arguments_text
        with pytest.raises(rl.Forbidden):
            app.approve(gate.id, "a service may not")
        decided = approver.approve(gate.id, "invoice checked")
        assert decided.status == "approved" and decided.approved_by == ["alice"]
        done = app.wait(run.run_id, timeout=WAIT)
        assert done.status == "succeeded", (done, stack.log("w1"))
        assert done.result["paid"] is True
        # A second approval is refused (asked while the resumed run executes, it is a 409
        # too: `conflict`, or `busy` while the worker holds the run's row; test_api_busy.py).
        with pytest.raises(rl.Conflict):
            approver.approve(gate.id, "twice")
    charge = ProviderCharge.objects.get()  # the effect happened once
    assert done.result["charge_id"] == charge.charge_id
    step = Step.objects.get(run_id=run.run_id, step_id="pay_out")
    assert charge.idempotency_key == step.effect_key
    used = Gate.objects.get()
    assert used.status == "used" and used.used_at is not None
    assert list(AuditEvent.objects.filter(action="gate_approve").values_list("actor")) == [
        ("alice",)
    ]


def test_a_run_started_with_its_own_webhook_gets_one_signed_run_succeeded(
    stack: ApiStack,
) -> None:
    receiver = EventReceiver()
    try:
        shop = tokens.token_create(name="shop", role="operator").secret
        stack.worker("w1")
        hooks = [{"url": receiver.url, "events": ["run.succeeded"]}]
        with rl.Client(stack.url, shop) as app:
            run = app.start(
                "refund", {"invoice_id": "inv_1001"}, idempotency_key="d-1", webhooks=hooks
            )
            [hook] = run.webhooks
            assert hook.secret and hook.secret.startswith("whsec_") and hook.run_id == run.run_id
            again = app.start(
                "refund", {"invoice_id": "inv_1001"}, idempotency_key="d-1", webhooks=hooks
            )
            assert again.created is False and again.webhooks == []
            other = app.start("refund", {"invoice_id": "inv_1002"})  # no subscription
            assert app.wait(run.run_id, timeout=WAIT).status == "succeeded", stack.log("w1")
            assert app.wait(other.run_id, timeout=WAIT).status == "succeeded", stack.log("w1")
        delivered = Notification.objects.filter(subscription__isnull=False)
        assert wait_for(
            lambda: delivered.filter(status=DeliveryStatus.SENT).count() >= 1, timeout=WAIT
        ), stack.log("w1")
        assert delivered.count() == 1  # one event for the one subscribed run
        got = [
            rl.verify_webhook(body, headers, hook.secret) for headers, body in receiver.received()
        ]
        by_id = {h["webhook-id"] for h, _ in receiver.received()}
        assert len(by_id) == 1  # retries (if any) carry the same id: one event to act on
        assert {(e["type"], e["data"]["run_id"]) for e in got} == {("run.succeeded", run.run_id)}
        assert got[0]["data"]["result"] == Run.objects.get(pk=run.run_id).result
        with pytest.raises(rl.WebhookVerificationError):
            headers, body = receiver.received()[0]
            rl.verify_webhook(body.replace(b"succeeded", b"failed"), headers, hook.secret)
    finally:
        receiver.stop()
