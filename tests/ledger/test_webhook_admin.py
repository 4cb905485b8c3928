"""The admin's webhook subscriptions (issue 20, item 5): a superuser adds one through
``ledger.events.subscribe`` (the secret shown once, audited), a bad one is refused with the
reason and nothing written, and the remove action stops them; no one edits one in place."""

from __future__ import annotations

import pytest
from django.urls import reverse

from ledger.models import AuditEvent, WebhookSubscription
from tests.support import event_agents

pytestmark = pytest.mark.django_db

ADD = reverse("admin:ledger_webhooksubscription_add")
LIST = reverse("admin:ledger_webhooksubscription_changelist")
FORM = {
    "url": "https://app.example.com/hooks/runledger",
    "agent": event_agents.events_echo.name,
    "run_id": "",
    "events": ["run.succeeded", "run.failed"],
    "description": "billing",
}


def test_a_superuser_adds_a_subscription_and_sees_its_secret_once(admin_client) -> None:
    page = admin_client.post(ADD, FORM, follow=True).content.decode()
    subscription = WebhookSubscription.objects.get()
    assert subscription.events == ["run.succeeded", "run.failed"]
    assert "signing secret, shown once" in page and subscription.secret in page
    assert AuditEvent.objects.get().action == "webhook_subscribe"
    detail = admin_client.get(
        reverse("admin:ledger_webhooksubscription_change", args=[subscription.pk])
    ).content.decode()
    listing = admin_client.get(LIST).content.decode()
    assert subscription.secret not in detail and subscription.secret not in listing
    assert FORM["url"] in listing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"agent": "nobody"}, "no agent named &#x27;nobody&#x27; is registered"),
        ({"agent": "", "run_id": "run_missing"}, "there is no run &#x27;run_missing&#x27;"),
        ({"agent": ""}, "subscribe either an agent"),
        ({"url": "ftp://app.example.com/x"}, "is not an http(s) URL"),
        # the SSRF policy (issue 30): refused in the admin as everywhere else
        ({"url": "http://169.254.169.254/latest/meta-data/"}, "refused as a webhook"),
        ({"url": "http://metadata.google.internal/"}, "cloud metadata service"),
        ({"url": "https://u:pw@app.example.com/x"}, "user name or password"),
    ],
)
def test_a_bad_subscription_is_refused_in_the_form(admin_client, change, message) -> None:
    page = admin_client.post(ADD, {**FORM, **change}).content.decode()
    assert message in page
    assert not WebhookSubscription.objects.exists() and not AuditEvent.objects.exists()


def test_the_remove_action_stops_the_selected_subscriptions(admin_client) -> None:
    admin_client.post(ADD, FORM)
    pk = WebhookSubscription.objects.get().pk
    admin_client.post(
        LIST, {"action": "remove_subscriptions", "_selected_action": [str(pk)]}, follow=True
    )
    assert WebhookSubscription.objects.get().removed_at is not None
    assert [e.action for e in AuditEvent.objects.order_by("id")] == [
        "webhook_subscribe",
        "webhook_unsubscribe",
    ]
