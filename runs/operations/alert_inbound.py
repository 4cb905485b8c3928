"""Acknowledgements that come back from the pager.

An on-call engineer acknowledges the page where it reached them — the PagerDuty or Opsgenie app
— not on the Alerts page. Each of those receivers may declare an ``inbound_secret``
(``RUNLEDGER_ALERT_RECEIVERS``), and the pager's webhook back to runledger,
``POST /hooks/alerts/<receiver name>``, then acknowledges the incident here exactly as the
Alerts page's button does: paging stops, and whoever acknowledged is on its runs ("I'm on it").

* **PagerDuty** (a V3 webhook subscription on the service, event ``incident.acknowledged``;
  its signing secret is the ``inbound_secret``): the body is verified against
  ``X-PagerDuty-Signature`` (``v1=<HMAC-SHA256 of the body>``, one per live secret); the
  incident's ``incident_key`` is the dedup key runledger paged with. The person is the event's
  ``agent`` (``pagerduty:<name>``, PagerDuty sends a name, not an address).
* **Opsgenie** (an outgoing Webhook integration with "Add Alert Acknowledge" on, and a custom
  header ``Authorization: Bearer <inbound_secret>``): ``action`` ``Acknowledge``, the alert's
  ``alias`` is the dedup key; the person is ``alert.username`` — a runledger person with that
  e-mail address when exactly one active one has it, else ``opsgenie:<username>``.

Anything else (another event, an incident runledger did not open, one already resolved here)
is answered 202 and changes nothing: a pager retries a failed delivery, and there is nothing to
retry. A repeat of the same acknowledgement changes nothing (the transition is idempotent).
Resolving in the pager does not resolve here: an incident resolves when its condition clears.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ledger import transitions
from ledger.alert_rules import Receiver
from ledger.models import Alert, AlertStatus
from ledger.processes import alerting

log = logging.getLogger(__name__)

#: The longest name kept for who acknowledged (the actor column's width).
_NAME_CHARS = 120


@dataclass(frozen=True)
class Acknowledgement:
    dedup_key: str
    who: Any  # an actor: a person, or "pagerduty:<name>" / "opsgenie:<username>"


def _problem(status: int, title: str, detail: str) -> JsonResponse:
    return JsonResponse(
        {"type": "about:blank", "title": title, "status": status, "detail": detail},
        status=status,
        content_type="application/problem+json",
    )


def pagerduty_signed(body: bytes, header: str, secret: str) -> bool:
    """Whether ``X-PagerDuty-Signature`` holds ``v1=`` the HMAC-SHA256 of ``body`` under
    ``secret`` (PagerDuty sends one signature per live secret, comma-separated)."""
    expected = "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, part.strip()) for part in header.split(","))


def bearer_matches(header: str, secret: str) -> bool:
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), secret)


def _text(value: Any) -> str:
    return value.strip()[:_NAME_CHARS] if isinstance(value, str) else ""


def pagerduty_acknowledgement(payload: Any) -> Acknowledgement | None:
    """The acknowledgement a PagerDuty V3 webhook carries, None for any other event."""
    event = payload.get("event") if isinstance(payload, dict) else None
    if not isinstance(event, dict) or event.get("event_type") != "incident.acknowledged":
        return None
    data = event.get("data")
    key = _text(data.get("incident_key")) if isinstance(data, dict) else ""
    if not key:
        return None
    agent = event.get("agent")
    name = _text(agent.get("summary")) if isinstance(agent, dict) else ""
    return Acknowledgement(dedup_key=key, who=f"pagerduty:{name}" if name else "pagerduty")


def opsgenie_acknowledgement(payload: Any) -> Acknowledgement | None:
    """The acknowledgement an Opsgenie outgoing webhook carries, None for any other action."""
    if not isinstance(payload, dict) or payload.get("action") != "Acknowledge":
        return None
    alert = payload.get("alert")
    if not isinstance(alert, dict):
        return None
    key = _text(alert.get("alias"))
    if not key:
        return None
    username = _text(alert.get("username"))
    return Acknowledgement(dedup_key=key, who=_person(username, prefix="opsgenie"))


def _person(address: str, *, prefix: str) -> Any:
    """The one active runledger person with this e-mail address, else ``<prefix>:<address>``."""
    if "@" in address:
        found = list(get_user_model().objects.filter(email__iexact=address, is_active=True)[:2])
        if len(found) == 1:
            return found[0]
    return f"{prefix}:{address}" if address else prefix


def _receiver(name: str) -> Receiver | None:
    found = alerting.configured().receivers.get(name)
    if found is None or not found.inbound_secret or found.type not in ("pagerduty", "opsgenie"):
        return None
    return found


@csrf_exempt
@require_POST
def alert_hook(request: HttpRequest, receiver: str) -> JsonResponse:
    """``POST /hooks/alerts/<receiver>``: a pager's acknowledgement (see the module)."""
    found = _receiver(receiver)
    if found is None:
        return _problem(
            404, "Not Found", f"no receiver {receiver!r} takes acknowledgements back (its "
            "RUNLEDGER_ALERT_RECEIVERS entry needs an inbound_secret)"
        )  # fmt: skip
    body = request.body
    if found.type == "pagerduty":
        signed = pagerduty_signed(
            body, request.headers.get("X-PagerDuty-Signature", ""), found.inbound_secret
        )
    else:
        signed = bearer_matches(request.headers.get("Authorization", ""), found.inbound_secret)
    if not signed:
        log.warning("alert acknowledgement for %s refused: not signed with its secret", receiver)
        return _problem(403, "Forbidden", "the request is not signed with this receiver's secret")
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return _problem(400, "Bad Request", "the body is not JSON")
    parse = pagerduty_acknowledgement if found.type == "pagerduty" else opsgenie_acknowledgement
    ack = parse(payload)
    if ack is None:
        return JsonResponse({"acknowledged": None, "detail": "not an acknowledgement"}, status=202)
    alert = (
        Alert.objects.exclude(status=AlertStatus.RESOLVED).filter(dedup_key=ack.dedup_key).first()
    )
    if alert is None:
        return JsonResponse(
            {"acknowledged": None, "detail": f"no open incident {ack.dedup_key!r} here"},
            status=202,
        )
    try:
        done = alerting.alert_acknowledge(alert_id=alert.pk, by=ack.who)
    except transitions.OperationError as exc:  # resolved meanwhile
        return JsonResponse({"acknowledged": None, "detail": str(exc)}, status=202)
    log.info("alert %s acknowledged from %s by %s", alert.dedup_key, receiver, done.alert.acked_by)
    return JsonResponse(
        {
            "acknowledged": alert.pk,
            "changed": done.changed,
            "acked_by": done.alert.acked_by,
            "taken": done.taken,
        }
    )
