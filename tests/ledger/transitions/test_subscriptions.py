"""Subscribing to completion events (issue 20, item 5): a subscription per agent or per run with
a generated Standard Webhooks secret shown once, audited when a person or service asks, and
every bad request refused with a clear message and nothing written."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from ledger import events, transitions
from ledger.errors import InvalidInput, NotAllowed
from ledger.models import AuditEvent, WebhookSubscription
from tests.support import event_agents

pytestmark = pytest.mark.django_db

AGENT = event_agents.events_echo.name
URL = "https://app.example.com/hooks/runledger"


def test_a_subscription_gets_a_fresh_secret_and_all_events_unless_told(clock) -> None:
    subscription, secret = events.subscribe(URL, agent=AGENT, clock=clock)
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert subscription.secret == secret != events.subscribe(URL, agent=AGENT)[1]
    assert subscription.events == list(events.EVENT_TYPES)
    assert (subscription.agent, subscription.run_id, subscription.created_at) == (
        AGENT,
        "",
        clock(),
    )
    assert not AuditEvent.objects.exists()  # the system's own subscriptions are not audited


def test_a_person_s_subscription_and_its_removal_are_audited_without_the_secret(clock) -> None:
    run = transitions.run_start(agent=AGENT, inputs={"n": 1}, clock=clock)
    subscription, secret = events.subscribe(
        "http://127.0.0.1:9/hook", run_id=run.run_id, events="run.failed, run.succeeded",
        description="billing backend", by="api:billing", clock=clock,
    )  # fmt: skip
    assert subscription.events == ["run.succeeded", "run.failed"]  # the documented order
    events.unsubscribe(subscription.pk, by="cli:ops", clock=clock)
    audit = list(AuditEvent.objects.filter(run_id=run.run_id).order_by("id"))
    assert [(e.action, e.actor) for e in audit] == [
        ("webhook_subscribe", "api:billing"),
        ("webhook_unsubscribe", "cli:ops"),
    ]
    assert audit[0].after["url"] == "http://127.0.0.1:9/hook"
    assert all(secret not in str(e.after) + str(e.before) for e in audit)
    subscription.refresh_from_db()
    assert (subscription.removed_at, subscription.removed_by) == (clock(), "cli:ops")
    assert events.subscriptions() == [] and events.subscriptions(removed=True) == [subscription]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "ftp://app.example.com/hook", "agent": AGENT}, "is not an http"),
        ({"url": "javascript:alert(1)", "agent": AGENT}, "is not an http"),
        ({"url": "app.example.com/hook", "agent": AGENT}, "is not an http"),
        ({"url": "", "agent": AGENT}, "needs the URL"),
        ({"url": "https://x.example/" + "a" * 2000, "agent": AGENT}, "longer than 2000"),
        ({"url": URL, "agent": AGENT, "events": ["run.finished"]}, "unknown event.*run.finished"),
        ({"url": URL, "agent": AGENT, "events": []}, "at least one of"),
        ({"url": URL, "agent": "no-such-agent"}, "no agent named 'no-such-agent'"),
        ({"url": URL, "run_id": "run_missing"}, "there is no run 'run_missing'"),
        ({"url": URL, "agent": AGENT, "run_id": "run_x"}, "either an agent"),
        ({"url": URL}, "either an agent"),
        ({"url": URL, "agent": AGENT, "description": "d" * 201}, "at most 200"),
    ],
)
def test_a_bad_subscription_is_refused_and_writes_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    url = kwargs.pop("url")
    with pytest.raises(InvalidInput, match=message):
        events.subscribe(url, by="api:billing", **kwargs)
    assert not WebhookSubscription.objects.exists()
    assert not AuditEvent.objects.exists()


def test_removing_an_unknown_or_removed_subscription_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no webhook subscription 4242"):
        events.unsubscribe(4242, by="cli:ops")
    subscription, _ = events.subscribe(URL, agent=AGENT)
    events.unsubscribe(subscription.pk, by="cli:ops")
    with pytest.raises(NotAllowed, match="already removed"):
        events.unsubscribe(subscription.pk, by="cli:ops")
    assert AuditEvent.objects.count() == 1
