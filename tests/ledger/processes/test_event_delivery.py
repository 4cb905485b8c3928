"""Completion events (issue 20, item 5): an application's subscription gets one signed event per
run ending — run.succeeded, run.failed, run.cancelled, run.needs_attention — written in the
outbox with the transition, POSTed to a real HTTP receiver on loopback as a Standard Webhook,
retried with back-off while it is down, and deduplicable by ``webhook-id`` when a retry repeats
a message the receiver already took. Executions are the engine's own, in this process, on the
test database; the deliverer runs on the test's fake clock and the receiver verifies on it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from ledger import events, transitions
from ledger.errors import LeaseLost
from ledger.models import DeliveryStatus, Notification, Run, RunStatus, WebhookSubscription
from ledger.processes import delivery
from ledger.webhooks import WebhookVerificationError, verify_webhook
from tests.support import event_agents
from tests.support.receivers import EventReceiver, free_port

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = event_agents.events_echo.name


@pytest.fixture
def receiver() -> Iterator[EventReceiver]:
    r = EventReceiver()
    yield r
    r.stop()


def start(clock: Any, **inputs: Any) -> Run:
    return transitions.run_start(agent=AGENT, inputs={"n": 1, **inputs}, clock=clock)


def verified(receiver: EventReceiver, secret: str, clock: Any) -> list[dict[str, Any]]:
    """Every request the receiver got, verified as a Standard Webhook (raises otherwise)."""
    return [verify_webhook(body, h, secret, now=clock()) for h, body in receiver.received()]


def test_a_subscribed_receiver_gets_one_signed_run_succeeded_per_run(
    execute, clock, receiver
) -> None:
    subscription, secret = events.subscribe(receiver.url, agent=AGENT, events=["run.succeeded"])
    runs = [start(clock, n=i) for i in range(3)]
    for run in runs:
        assert execute(run.run_id).status == "succeeded"
    rows = Notification.objects.filter(subscription=subscription)
    assert sorted(rows.values_list("run_id", flat=True)) == sorted(r.run_id for r in runs)
    assert set(rows.values_list("kind", "status")) == {("run.succeeded", DeliveryStatus.PENDING)}
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [True, True, True]
    assert delivery.deliver_due(clock=clock) == []  # nothing twice
    got = verified(receiver, secret, clock)
    assert {e["data"]["run_id"]: e["data"]["result"] for e in got} == {
        r.run_id: {"echo": {"n": i}} for i, r in enumerate(runs)
    }
    first = got[0]
    assert first["type"] == "run.succeeded" and first["data"]["status"] == "succeeded"
    assert first["data"]["agent"] == AGENT and first["data"]["title"].startswith("Echo ")
    assert first["data"]["links"]["dashboard"].endswith(f"/runs/{first['data']['run_id']}/")
    assert first["data"]["finished_at"] and first["timestamp"]
    ids = {h["webhook-id"] for h, _ in receiver.received()}
    assert ids == {f"msg_{k}" for k in rows.values_list("idempotency_key", flat=True)}
    assert set(rows.values_list("status", flat=True)) == {DeliveryStatus.SENT}


def test_a_forged_or_altered_event_fails_verification(execute, clock, receiver) -> None:
    _, secret = events.subscribe(receiver.url, agent=AGENT)
    execute(start(clock).run_id)
    delivery.deliver_due(clock=clock)
    [(headers, body)] = receiver.received()
    other_secret = events.subscribe(receiver.url, agent=AGENT)[1]
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify_webhook(body, headers, other_secret, now=clock())
    with pytest.raises(WebhookVerificationError, match="no signature matches"):
        verify_webhook(body.replace(b"succeeded", b"failed"), headers, secret, now=clock())
    with pytest.raises(WebhookVerificationError, match="more than 300 s"):
        verify_webhook(body, headers, secret, now=clock() + timedelta(minutes=6))
    with pytest.raises(WebhookVerificationError, match=r"missing header.*webhook-signature"):
        verify_webhook(body, {**headers, "webhook-signature": ""}, secret, now=clock())


def test_failed_cancelled_and_needs_attention_each_fire_their_event(
    execute, clock, crash_at, receiver
) -> None:
    _, secret = events.subscribe(receiver.url, agent=AGENT)  # all four events
    failed, cancelled, blocked = start(clock, fail="no such invoice"), start(clock), start(clock)
    assert execute(failed.run_id).status == "failed"
    transitions.run_cancel(
        run_id=cancelled.run_id, by="olivia", reason="customer withdrew", seen_version=None,
        clock=clock,
    )  # fmt: skip
    crash_at("events.echo")
    execute(blocked.run_id, crash_expected=True)  # the worker dies; no resume budget is left
    assert execute(blocked.run_id).status == "needs_attention"
    delivery.deliver_due(clock=clock)
    got = {e["data"]["run_id"]: e for e in verified(receiver, secret, clock)}
    assert {run_id: e["type"] for run_id, e in got.items()} == {
        failed.run_id: "run.failed",
        cancelled.run_id: "run.cancelled",
        blocked.run_id: "run.needs_attention",
    }
    assert "no such invoice" in got[failed.run_id]["data"]["error"]
    assert got[cancelled.run_id]["data"]["detail"] == "cancelled by olivia: customer withdrew"
    assert got[blocked.run_id]["data"]["reason"] == "budget"
    assert got[blocked.run_id]["data"]["status"] == "needs_attention"


def test_a_per_run_subscription_hears_only_its_run(execute, clock, receiver) -> None:
    mine, other = start(clock, n=1), start(clock, n=2)
    _, secret = events.subscribe(receiver.url, run_id=mine.run_id)
    execute(mine.run_id)
    execute(other.run_id)
    delivery.deliver_due(clock=clock)
    assert [e["data"]["run_id"] for e in verified(receiver, secret, clock)] == [mine.run_id]
    assert Notification.objects.filter(run_id=other.run_id).count() == 0


def test_an_agent_subscription_ignores_other_agents_and_unwanted_events(
    execute, clock, receiver
) -> None:
    events.subscribe(receiver.url, agent="renewal")
    events.subscribe(receiver.url, agent=AGENT, events=["run.failed"])
    execute(start(clock).run_id)  # succeeded: nobody asked for that
    assert not Notification.objects.exists()


def test_the_event_is_written_with_the_transition_or_not_at_all(clock, receiver) -> None:
    events.subscribe(receiver.url, agent=AGENT)
    run = start(clock)
    token = transitions.lease_claim(run_id=run.run_id, owner="w", clock=clock)
    assert token is not None

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        transitions.run_finish(
            run_id=run.run_id, token=token, status=RunStatus.SUCCEEDED, result={}, clock=clock
        )
        assert Notification.objects.get().kind == "run.succeeded"  # in the same transaction
        raise Boom  # whatever ends the transaction ends it for both
    assert Run.objects.get(pk=run.run_id).status == "running"
    assert not Notification.objects.exists()
    with pytest.raises(LeaseLost):  # a worker that lost its lease announces nothing either
        transitions.run_finish(
            run_id=run.run_id, token="stolen", status=RunStatus.SUCCEEDED, clock=clock
        )
    assert not Notification.objects.exists()
    transitions.run_finish(run_id=run.run_id, token=token, status=RunStatus.SUCCEEDED, clock=clock)
    assert Notification.objects.get().kind == "run.succeeded"


def test_a_receiver_that_is_down_gets_the_event_after_back_off(execute, clock, settings) -> None:
    settings.RUNLEDGER_NOTIFY_BACKOFF_SECONDS = 10
    port = free_port()  # nothing listens here yet
    _, secret = events.subscribe(f"http://127.0.0.1:{port}/hooks/runledger", agent=AGENT)
    execute(start(clock).run_id)
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    row = Notification.objects.get()
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert "unreachable" in row.last_error and f"subscription {row.subscription_id}" in (
        row.last_error
    )
    assert row.next_attempt_at == clock() + timedelta(seconds=10)
    assert delivery.deliver_due(clock=clock) == []  # not before its back-off
    clock.advance(10)
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    row.refresh_from_db()
    assert row.next_attempt_at == clock() + timedelta(seconds=20)
    up = EventReceiver(port)  # the receiver comes back
    try:
        clock.advance(20)
        assert [d.ok for d in delivery.deliver_due(clock=clock)] == [True]
        row.refresh_from_db()
        assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.SENT, 3, "")
        [event] = verified(up, secret, clock)
        assert event["type"] == "run.succeeded"
    finally:
        up.stop()


def test_a_retry_after_a_receiver_timeout_repeats_the_webhook_id(
    execute, clock, settings, receiver
) -> None:
    settings.RUNLEDGER_NOTIFY_TIMEOUT_SECONDS = 0.5
    _, secret = events.subscribe(receiver.url, agent=AGENT)
    run = start(clock)
    execute(run.run_id)
    receiver.hold()  # it takes the request and answers too late
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    assert "timed out" in Notification.objects.get().last_error
    receiver.release()
    clock.advance(60)  # past the first back-off (10 s), within the receiver's 5 minutes
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [True]
    got = verified(receiver, secret, clock)  # both attempts are signed, each when it was sent
    assert [e["data"]["run_id"] for e in got] == [run.run_id, run.run_id]
    first, second = (h for h, _ in receiver.received())
    assert first["webhook-id"] == second["webhook-id"]
    assert first["webhook-timestamp"] != second["webhook-timestamp"]
    assert list(receiver.taken()) == [first["webhook-id"]]  # an application acts once


def test_a_removed_subscription_gets_nothing_more(execute, clock, receiver) -> None:
    subscription, _ = events.subscribe(receiver.url, agent=AGENT)
    execute(start(clock).run_id)  # queued before the removal
    events.unsubscribe(subscription.pk)
    assert [d.ok for d in delivery.deliver_due(clock=clock)] == [False]
    row = Notification.objects.get()
    assert (row.status, row.attempts) == (DeliveryStatus.FAILED, 1)  # given up at once
    assert "was removed" in row.last_error
    execute(start(clock).run_id)
    assert Notification.objects.count() == 1 and receiver.received() == []


def test_a_run_subscription_follows_the_run_into_its_continuation(execute, clock, receiver) -> None:
    parent = start(clock, **{"continue": True})
    _, secret = events.subscribe(receiver.url, run_id=parent.run_id, events=["run.succeeded"])
    outcome = execute(parent.run_id)
    child_id = outcome.continued_as
    assert child_id and execute(child_id).status == "succeeded"
    follower = WebhookSubscription.objects.get(run_id=child_id)
    assert (follower.url, follower.secret, follower.events) == (
        receiver.url,
        secret,
        ["run.succeeded"],
    )
    delivery.deliver_due(clock=clock)
    got = {e["data"]["run_id"]: e["data"] for e in verified(receiver, secret, clock)}
    assert got[parent.run_id]["continued_as"] == child_id
    assert got[child_id]["result"] == {"echo": {"n": 1, "continue": False, "continued": True}}
    assert "continued_as" not in got[child_id]


def test_an_admin_setting_a_run_failed_announces_it(clock, receiver, admin_user) -> None:
    events.subscribe(receiver.url, agent=AGENT, events=["run.failed"])
    run = start(clock)
    transitions.run_admin_edit(
        run=run, by=admin_user, reason="the customer's bank refused", changes={"status": "failed"},
        seen_version=run.version, clock=clock,
    )  # fmt: skip
    assert Notification.objects.get().kind == "run.failed"


def test_a_large_result_is_left_out_with_its_size(execute, clock, receiver, settings) -> None:
    settings.RUNLEDGER_EVENT_MAX_RESULT_BYTES = 100
    _, secret = events.subscribe(receiver.url, agent=AGENT)
    execute(start(clock, blob="x" * 200).run_id)
    delivery.deliver_due(clock=clock)
    [event] = verified(receiver, secret, clock)
    assert event["data"]["result"] is None
    assert event["data"]["result_omitted"].endswith("bytes of JSON; read it from the API")


def test_an_event_recorded_again_for_the_same_change_is_one_row(execute, clock, receiver) -> None:
    events.subscribe(receiver.url, agent=AGENT)
    run = start(clock)
    execute(run.run_id)
    transitions.notify_run_event(run_id=run.run_id, at=clock())  # as a repeated call would
    assert Notification.objects.count() == 1
