"""Completion events for applications: subscribe a URL to what happens to runs.

::

    from ledger import events

    subscription, secret = events.subscribe(
        "https://app.example.com/hooks/runledger", agent="refund", events=["run.succeeded"]
    )
    # keep `secret` (whsec_…) in the application's configuration: it is shown once

Every run of that agent that succeeds is then POSTed to the URL as JSON, signed as a Standard
Webhook; the application checks it with ``verify_webhook`` (``ledger.webhooks``, which needs no
Django) and acts once per ``webhook-id``. ``manage.py webhooks add|list|remove`` and the admin
do the same from outside Python. Deliveries are outbox rows of the notification machinery:
written with the transition that ended the run, retried with back-off, listed on the
dashboard's Notifications page.
"""

from __future__ import annotations

from collections.abc import Collection

from ledger.models import WebhookSubscription
from ledger.selectors import webhook_subscriptions
from ledger.transitions.events import subscribe, unsubscribe
from ledger.webhooks import EVENT_TYPES, WebhookVerificationError, verify_webhook

__all__ = [
    "EVENT_TYPES",
    "WebhookSubscription",
    "WebhookVerificationError",
    "subscribe",
    "subscriptions",
    "unsubscribe",
    "verify_webhook",
]


def subscriptions(
    *,
    agent: str = "",
    run_id: str = "",
    removed: bool = False,
    teams: Collection[str] | None = None,
) -> list[WebhookSubscription]:
    """The live subscriptions (and removed ones with ``removed``), of one agent or run;
    ``teams``: only those teams' (None: every team)."""
    return webhook_subscriptions(agent=agent, run_id=run_id, removed=removed, teams=teams)
