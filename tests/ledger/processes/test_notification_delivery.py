"""Notifications (issue 10): an outbox row per channel written with the event, delivered to a
real HTTP receiver and a real SMTP server (aiosmtpd) on loopback, retried with back-off while
the receiver is down, reminded once after the configured age, and sent again after a deliverer
is SIGKILLed between sending and recording — under the same idempotency key, so the receiver
takes it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.db import connection

from ledger import transitions
from ledger.models import DeliveryStatus, Notification, Run, Settlement, Step
from ledger.processes import delivery
from tests.support.receivers import Mailbox, Receiver, free_port

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"


@pytest.fixture
def smtp(settings) -> Iterator[Mailbox]:
    box = Mailbox()
    port = free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.RUNLEDGER_NOTIFY_EMAIL_TO = ["oncall@example.com"]
    yield box
    controller.stop()


@pytest.fixture
def webhook(settings) -> Iterator[Receiver]:
    receiver = Receiver(free_port())
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{receiver.port}/hook"
    yield receiver
    receiver.stop()


def blocked_renewal(execute: Any, crash_at: Any) -> Run:
    run = transitions.run_start(
        agent="renewal", inputs={"customer": "cus_hopper"}, clock=execute.clock
    )
    crash_at("gateway.after_effect")
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id).status == "needs_attention"
    return Run.objects.get(pk=run.run_id)


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


def test_no_channel_configured_writes_no_notification(execute, crash_at) -> None:
    blocked_renewal(execute, crash_at)
    assert not Notification.objects.exists()


def test_a_run_needing_a_person_is_told_once_by_webhook_and_email(
    execute, crash_at, webhook, smtp, clock
) -> None:
    run = blocked_renewal(execute, crash_at)
    rows = Notification.objects.filter(run_id=run.run_id)
    assert sorted(r.channel for r in rows) == ["email", "webhook"]
    assert all(r.status == DeliveryStatus.PENDING for r in rows)
    done = delivery.deliver_due(clock=clock)
    assert [d.ok for d in done] == [True, True]
    assert delivery.deliver_due(clock=clock) == []  # nothing twice
    assert len(webhook.requests) == 1
    key, body = webhook.requests[0]
    assert body["event"] == "needs_attention" and body["run_id"] == run.run_id
    assert body["title"] == "Renew the subscription of cus_hopper" and body["reason"] == (
        "reconciliation"
    )
    assert key == body["idempotency_key"] == rows.get(channel="webhook").idempotency_key
    assert len(smtp.messages) == 1
    mail = smtp.messages[0].content.decode()
    assert "needs a person: Renew the subscription of cus_hopper" in mail
    assert rows.get(channel="email").idempotency_key in mail
    assert set(rows.values_list("status", flat=True)) == {DeliveryStatus.SENT}


def test_a_waiting_proposal_tells_the_approvers(execute, crash_at, webhook, clock) -> None:
    run = blocked_renewal(execute, crash_at)
    step = Step.objects.get(run=run, step_id="charge")
    settlement = transitions.settlement_propose(
        step=step, outcome="not_happened", reason="no charge in the report", by="olivia",
        seen_version=step.version, clock=clock,
    )  # fmt: skip
    delivery.deliver_due(clock=clock)
    events = [b["event"] for _, b in webhook.requests]
    assert events == ["needs_attention", "approval_waiting"]
    body = webhook.requests[1][1]
    assert body["settlement"]["id"] == settlement.pk
    assert body["settlement"]["proposed_by"] == "olivia"


def test_a_receiver_that_is_down_is_retried_with_back_off_until_it_is_back(
    execute, crash_at, settings, clock
) -> None:
    port = free_port()  # nothing listens here yet
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
    settings.RUNLEDGER_NOTIFY_BACKOFF_SECONDS = 10
    blocked_renewal(execute, crash_at)
    first = delivery.deliver_due(clock=clock)
    row = Notification.objects.get()
    assert [d.ok for d in first] == [False] and "unreachable" in row.last_error
    assert (row.status, row.attempts) == (DeliveryStatus.PENDING, 1)
    assert row.next_attempt_at == clock() + timedelta(seconds=10)
    assert delivery.deliver_due(clock=clock) == []  # not before its back-off
    clock.advance(10)
    delivery.deliver_due(clock=clock)
    row.refresh_from_db()
    assert row.attempts == 2 and row.next_attempt_at == clock() + timedelta(seconds=20)
    receiver = Receiver(port)  # the receiver comes back
    try:
        clock.advance(20)
        assert [d.ok for d in delivery.deliver_due(clock=clock)] == [True]
        row.refresh_from_db()
        assert (row.status, row.attempts, row.last_error) == (DeliveryStatus.SENT, 3, "")
        assert len(receiver.requests) == 1
    finally:
        receiver.stop()


def test_deliveries_and_failures_are_counted_for_metrics(
    execute, crash_at, settings, clock
) -> None:
    from runs.operations import metrics

    def scraped(text: str) -> str:
        return next(
            (
                line
                for line in metrics.exposition()[0].decode().splitlines()
                if line.startswith(text)
            ),
            "",
        )

    failed = 'runledger_notification_deliveries_total{channel="webhook",outcome="failed"}'
    sent = 'runledger_notification_deliveries_total{channel="webhook",outcome="sent"}'
    before = {k: float((scraped(k) or "x 0").split()[-1]) for k in (failed, sent)}
    port = free_port()
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{port}/hook"
    blocked_renewal(execute, crash_at)
    delivery.deliver_due(clock=clock)  # the receiver is down
    assert float(scraped(failed).split()[-1]) == before[failed] + 1
    assert scraped('runledger_notifications{channel="webhook",status="pending"}').endswith(" 1.0")
    receiver = Receiver(port)
    try:
        clock.advance(3600)
        delivery.deliver_due(clock=clock)
    finally:
        receiver.stop()
    assert float(scraped(sent).split()[-1]) == before[sent] + 1
    assert scraped('runledger_notifications{channel="webhook",status="sent"}').endswith(" 1.0")


def test_a_notification_is_given_up_after_the_last_attempt(
    execute, crash_at, settings, clock
) -> None:
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{free_port()}/hook"
    settings.RUNLEDGER_NOTIFY_MAX_ATTEMPTS = 2
    blocked_renewal(execute, crash_at)
    delivery.deliver_due(clock=clock)
    clock.advance(3600)
    delivery.deliver_due(clock=clock)
    row = Notification.objects.get()
    assert (row.status, row.attempts) == (DeliveryStatus.FAILED, 2)
    clock.advance(3600)
    assert delivery.deliver_due(clock=clock) == []


def test_a_long_wait_is_reminded_of_once(execute, crash_at, webhook, settings, clock) -> None:
    settings.RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS = 600
    run = blocked_renewal(execute, crash_at)
    step = Step.objects.get(run=run, step_id="charge")
    transitions.settlement_propose(
        step=step, outcome="abandon", reason="give up", by="olivia",
        seen_version=step.version, clock=clock,
    )  # fmt: skip
    assert transitions.notifications_remind(now=clock() + timedelta(seconds=599)) == 0
    later = clock() + timedelta(seconds=601)
    assert transitions.notifications_remind(now=later) == 2  # the run and the proposal
    assert transitions.notifications_remind(now=later + timedelta(hours=5)) == 0
    delivery.deliver_due(clock=lambda: later)
    kinds = sorted((b["event"], b.get("waiting", "")) for _, b in webhook.requests)
    assert kinds == [
        ("approval_waiting", ""),
        ("needs_attention", ""),
        ("reminder", "approval"),
        ("reminder", "run"),
    ]
    assert Settlement.objects.count() == 1


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a second process needs a server")
def test_a_deliverer_killed_after_sending_sends_again_under_the_same_key(
    execute, crash_at, webhook, clock
) -> None:
    run = blocked_renewal(execute, crash_at)
    row = Notification.objects.get(run_id=run.run_id)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "RUNLEDGER_NOTIFY_WEBHOOK_URL": f"http://127.0.0.1:{webhook.port}/hook",
        # The harness's fault registry kills the deliverer between sending and recording.
        "RUNLEDGER_HARNESS": "1",
        "RUNLEDGER_KILL_AT": "notify.after_send",
        "RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS": "0",  # the run blocked "yesterday" (fake clock)
    }
    done = subprocess.run(
        [sys.executable, str(MANAGE), "deliver_notifications"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert len(webhook.requests) == 1  # the receiver took it; the row does not know
    row.refresh_from_db()
    assert (row.status, row.attempts) == (DeliveryStatus.SENDING, 1)
    assert row.claimed_until is not None
    claimed = row.claimed_until - timedelta(seconds=1)
    assert delivery.deliver_due(clock=lambda: claimed) == []  # claimed: not sent meanwhile
    lapsed = row.claimed_until + timedelta(seconds=1)
    assert [d.ok for d in delivery.deliver_due(clock=lambda: lapsed)] == [True]
    row.refresh_from_db()
    assert (row.status, row.attempts) == (DeliveryStatus.SENT, 2)
    keys = [k for k, _ in webhook.requests]
    assert keys == [row.idempotency_key, row.idempotency_key]  # sent again, the same key
    assert len(webhook.taken()) == 1  # a receiver honouring the key acts once
