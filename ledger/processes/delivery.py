"""Delivering the notification outbox: webhook (JSON POST, or Slack-compatible), email, and
the applications' completion events (a POST to the subscription's URL, signed as a Standard
Webhook: ``webhook-id`` — the same on every attempt — ``webhook-timestamp``, ``webhook-signature``).

``deliver_due`` claims due rows one at a time (``transitions.notification_claim``), sends each
outside any transaction, then marks it sent or failed (with back-off). Every attempt carries the
row's idempotency key — the webhook's ``Idempotency-Key`` header and payload field, the email's
``Message-ID`` and ``X-Runledger-Idempotency-Key`` header — so a receiver recognises a message
sent again after a deliverer died between sending and recording it (the kill test sets
``RUNLEDGER_KILL_AT=notify.after_send`` to die in exactly that window).

No delivery follows a redirect: a 3xx is a failed attempt (its status recorded). A completion
event goes only where the SSRF policy (``ledger.egress``) allows, checked again at each attempt
after resolving the name, to the address checked.

An alert's page (``ledger.transitions.alerts``) goes to its receiver in that receiver's own
format (``page_request``): PagerDuty's Events API v2 (``event_action`` trigger, acknowledge or
resolve, with the incident's ``dedup_key``), Opsgenie's Alert API (create, acknowledge, close,
by ``alias``), a Slack incoming webhook's ``{"text": …}``, or a Standard Webhook signed with the
receiver's secret. A receiver groups a page sent again (a deliverer killed after sending) by its
key: PagerDuty and Opsgenie fold it into the open incident, the signed webhook carries the same
``webhook-id``; a Slack channel would show the line twice (Slack has no key to fold on).
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.mail import EmailMessage, get_connection
from django.utils import timezone

from ledger import alert_rules, egress, faultpoints, observe, transitions, webhooks
from ledger.conf import conf
from ledger.models import Notification
from ledger.transitions import notify

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


class DeliveryError(Exception):
    """The channel did not take the message (down, refused, timed out). ``final``: trying
    again cannot help (the subscription was removed), so the row is given up at once."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


@dataclass(frozen=True)
class Delivered:
    pk: int
    channel: str
    ok: bool
    error: str = ""


def deliver_due(*, clock: Clock = timezone.now, limit: int = 100) -> list[Delivered]:
    """Send up to ``limit`` due notifications; what happened to each."""
    done: list[Delivered] = []
    while len(done) < limit:
        row = transitions.notification_claim(
            now=clock(), claim_seconds=conf.RUNLEDGER_NOTIFY_TIMEOUT_SECONDS * 3 + 5
        )
        if row is None:
            break
        label = "subscription" if row.subscription_id is not None else row.channel
        label = "alert" if row.alert_id is not None else label
        try:
            send(row, at=clock())
        except DeliveryError as exc:
            transitions.notification_failed(
                pk=row.pk, token=row.claim_token, error=str(exc), now=clock(), final=exc.final
            )
            log.warning("notification %s to %s failed: %s", row.pk, row.channel, exc)
            observe.emit("notification", channel=label, outcome="failed")
            done.append(Delivered(row.pk, row.channel, ok=False, error=str(exc)))
            continue
        faultpoints.point("notify.after_send")  # the receiver has it; not yet recorded
        transitions.notification_sent(pk=row.pk, token=row.claim_token, now=clock())
        observe.emit("notification", channel=label, outcome="sent")
        done.append(Delivered(row.pk, row.channel, ok=True))
    return done


def send(row: Notification, *, at: datetime | None = None) -> None:
    """One attempt to deliver ``row``; ``at``: when it is signed (completion events)."""
    if row.subscription_id is not None:
        _send_event(row, at=at or timezone.now())
    elif row.alert_id is not None:
        _send_page(row, at=at or timezone.now())
    elif row.channel == "webhook":
        _send_webhook(row)
    elif row.channel == "email":
        _send_email(row)
    else:
        raise DeliveryError(f"unknown channel {row.channel!r}")


def text_of(row: Notification) -> str:
    """The message in words: subject, what happened, the link."""
    p = row.payload
    lines = [row.subject]
    if p.get("detail"):
        lines.append(str(p["detail"]))
    settlement = p.get("settlement") or {}
    if settlement.get("reason"):
        lines.append(f"Proposed by {settlement.get('proposed_by')}: {settlement['reason']}")
    lines.append(str(p.get("url", "")))
    return "\n".join(lines)


def _send_webhook(row: Notification) -> None:
    url = conf.RUNLEDGER_NOTIFY_WEBHOOK_URL
    if not url:
        raise DeliveryError("RUNLEDGER_NOTIFY_WEBHOOK_URL is not set")
    if conf.RUNLEDGER_NOTIFY_WEBHOOK_FORMAT == "slack":
        body: dict[str, object] = {"text": text_of(row)}
    else:
        body = {**row.payload, "subject": row.subject}
    _post(url, json.dumps(body), {"Idempotency-Key": row.idempotency_key}, what="the webhook")


def _send_event(row: Notification, *, at: datetime) -> None:
    """POST a completion event to its subscription, signed for this attempt."""
    subscription = row.subscription
    assert subscription is not None
    if subscription.removed_at is not None:
        raise DeliveryError(f"subscription {subscription.pk} was removed", final=True)
    body = json.dumps(row.payload)  # the exact bytes signed are the bytes sent
    headers = webhooks.signed_headers(
        secret=subscription.secret, msg_id=notify.message_id(row.idempotency_key), at=at, body=body
    )
    _post_checked(subscription.url, body, headers, what=f"subscription {subscription.pk}'s URL")


def _post(url: str, body: str, headers: dict[str, str], *, what: str) -> None:
    """The operator's own webhook (``RUNLEDGER_NOTIFY_WEBHOOK_URL``, set in the deployment's
    settings): through urllib, so an egress proxy in ``HTTPS_PROXY`` is honoured, but never
    following a redirect."""
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "runledger", **headers},
    )
    try:
        with _NO_REDIRECTS.open(request, timeout=conf.RUNLEDGER_NOTIFY_TIMEOUT_SECONDS) as r:
            _check_status(int(r.status), what=what)
    except urllib.error.HTTPError as exc:
        _check_status(int(exc.code), what=what)
    except (urllib.error.URLError, OSError) as exc:
        raise DeliveryError(f"{what} is unreachable: {exc}") from None


def _post_checked(url: str, body: str, headers: dict[str, str], *, what: str) -> None:
    """An application's subscription: the URL and every address its name resolves to pass
    the SSRF policy now (``ledger.egress``), the request goes to the address checked, and a
    redirect is not followed."""
    try:
        status = egress.post(
            url,
            body.encode(),
            {"Content-Type": "application/json", "User-Agent": "runledger", **headers},
            timeout=conf.RUNLEDGER_NOTIFY_TIMEOUT_SECONDS,
        )
    except egress.Refused as exc:
        raise DeliveryError(f"{what} is refused by the webhook policy: {exc}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"{what} is unreachable: {exc}") from None
    _check_status(status, what=what)


def _check_status(status: int, *, what: str) -> None:
    if 300 <= status < 400:
        raise DeliveryError(f"{what} answered HTTP {status}, a redirect (never followed)")
    if not 200 <= status < 300:
        raise DeliveryError(f"{what} answered HTTP {status}")


class _Refuse3xx(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


_NO_REDIRECTS = urllib.request.build_opener(_Refuse3xx)


def _send_email(row: Notification) -> None:
    message = EmailMessage(
        subject=row.subject,
        body=text_of(row),
        from_email=conf.RUNLEDGER_NOTIFY_EMAIL_FROM,
        to=list(conf.RUNLEDGER_NOTIFY_EMAIL_TO),
        headers={
            "Message-ID": f"<{row.idempotency_key}@runledger>",
            "X-Runledger-Idempotency-Key": row.idempotency_key,
        },
        connection=get_connection(timeout=conf.RUNLEDGER_NOTIFY_TIMEOUT_SECONDS),
    )
    try:
        message.send()
    except OSError as exc:  # smtplib's errors are OSErrors
        raise DeliveryError(f"the mail server did not take it: {exc}") from None


# --- alert pages ------------------------------------------------------------------------------

_PD_SEVERITY = {"critical": "critical", "error": "error", "warning": "warning", "info": "info"}
_OG_PRIORITY = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}


def _send_page(row: Notification, *, at: datetime) -> None:
    receivers = alert_rules.parse_receivers(conf.RUNLEDGER_ALERT_RECEIVERS)
    name = row.channel.removeprefix("alert:")
    receiver = receivers.get(name)
    if receiver is None:
        raise DeliveryError(f"alert receiver {name!r} is not configured any more", final=True)
    url, body, headers = page_request(receiver, row, at=at)
    _post(url, body, {"Idempotency-Key": row.idempotency_key, **headers}, what=f"{name}")


def page_request(
    receiver: alert_rules.Receiver, row: Notification, *, at: datetime
) -> tuple[str, str, dict[str, str]]:
    """(URL, body, headers) of one attempt to send an alert's page to ``receiver``."""
    p = row.payload
    action, key = str(p["action"]), str(p["dedup_key"])
    if receiver.type == "pagerduty":
        event: dict[str, Any] = {
            "routing_key": receiver.routing_key,
            "event_action": action,
            "dedup_key": key,
        }
        if action == "trigger":
            event["payload"] = {
                "summary": str(p["summary"])[:1024],
                "source": "runledger",
                "severity": _PD_SEVERITY.get(str(p.get("severity")), "error"),
                "component": p.get("scope") or "all",
                "group": p["rule"],
                "class": p.get("condition", ""),
                "custom_details": {"count": p.get("count"), "run_ids": p.get("run_ids")},
            }
            event["links"] = [{"href": p["url"], "text": "runledger: the incident"}]
        return receiver.url, json.dumps(event), {}
    if receiver.type == "opsgenie":
        base = receiver.url.rstrip("/") + "/v2/alerts"
        auth = {"Authorization": f"GenieKey {receiver.api_key}"}
        if action == "trigger":
            body = {
                "message": str(p["summary"])[:130],
                "alias": key,
                "description": f"{p.get('condition', '')}\n{p['url']}",
                "details": {
                    "rule": p["rule"],
                    "scope": p.get("scope") or "all",
                    "count": str(p.get("count")),
                },
                "priority": _OG_PRIORITY.get(str(p.get("severity")), "P2"),
                "source": "runledger",
            }
            return base, json.dumps(body), auth
        verb = "acknowledge" if action == "acknowledge" else "close"
        url = f"{base}/{urllib.parse.quote(key, safe='')}/{verb}?identifierType=alias"
        note = {"source": "runledger", "user": p.get("acked_by") or "runledger",
                "note": f"{action}d in runledger"}  # fmt: skip
        return url, json.dumps(note), auth
    if receiver.type == "slack":
        words = {"trigger": ":rotating_light: Triggered", "acknowledge": ":eyes: Acknowledged",
                 "resolve": ":white_check_mark: Resolved"}[action]  # fmt: skip
        who = f" by {p['acked_by']}" if action == "acknowledge" and p.get("acked_by") else ""
        text = f"{words}{who}: {p['summary']} ({p['rule']}, {p.get('scope') or 'all'})\n{p['url']}"
        return receiver.url, json.dumps({"text": text}), {}
    body_text = json.dumps({"type": f"alert.{action}", "timestamp": at.isoformat(), "data": p})
    headers = webhooks.signed_headers(
        secret=receiver.secret, msg_id=notify.message_id(row.idempotency_key), at=at,
        body=body_text,
    )  # fmt: skip
    return receiver.url, body_text, headers
