"""Acknowledgements from the pager (``runs.operations.alert_inbound``): a PagerDuty V3 webhook
and an Opsgenie outgoing webhook, in the shapes those services send, acknowledge runledger's
incident by its dedup key — who acknowledged is then on its runs — and anything unsigned,
unknown or repeated changes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from ledger.models import Alert, AuditEvent, Handover
from ledger.processes import alerting

pytestmark = pytest.mark.django_db(transaction=True)

PD_SECRET = "pd-signing-secret-0123456789"
OG_SECRET = "og-inbound-secret-0123456789"


@pytest.fixture
def paged(settings: Any, blocked: Any) -> tuple[Alert, str]:
    """An open incident of a blocked refund run, paged to PagerDuty and Opsgenie."""
    settings.RUNLEDGER_ALERT_RECEIVERS = json.dumps(
        {
            "pd": {"type": "pagerduty", "routing_key": "r" * 32, "url": "https://pd.example/e",
                   "inbound_secret": PD_SECRET},
            "og": {"type": "opsgenie", "api_key": "k" * 32, "url": "https://og.example",
                   "inbound_secret": OG_SECRET},
            "slack": {"type": "slack", "url": "https://hooks.slack.example/x"},
        }
    )  # fmt: skip
    settings.RUNLEDGER_ALERT_RULES = json.dumps(
        [{"name": "stuck", "kind": "blocked_longer", "minutes": 5, "per": "agent"}]
    )
    run = blocked()
    alerting.alerts_evaluate(clock=lambda: timezone.now() + timedelta(days=1))
    alert = Alert.objects.get()
    return alert, run.run_id


def pagerduty_event(event_type: str, incident_key: str, who: str = "Jane Doe") -> bytes:
    """A V3 webhook body as PagerDuty sends it (trimmed to what it always holds)."""
    return json.dumps(
        {
            "event": {
                "id": "01DEN4HPBQAX0BZ7N1UH8GNPXQ",
                "event_type": event_type,
                "resource_type": "incident",
                "occurred_at": "2026-12-03T20:00:00.000Z",
                "agent": {"id": "PLH1HKV", "type": "user_reference", "summary": who,
                          "html_url": "https://acme.pagerduty.com/users/PLH1HKV"},
                "data": {"id": "Q0RIJJZL24RC6W", "type": "incident", "number": 2,
                         "status": "acknowledged", "incident_key": incident_key,
                         "title": "refund blocked", "html_url": "https://acme.pagerduty.com/x"},
            }
        }
    ).encode()  # fmt: skip


def signed(body: bytes, secret: str = PD_SECRET) -> str:
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post_pd(body: bytes, signature: str) -> Any:
    return Client().post(
        "/hooks/alerts/pd", body, content_type="application/json",
        headers={"X-PagerDuty-Signature": signature},
    )  # fmt: skip


def test_an_acknowledgement_in_pagerduty_acknowledges_the_incident_here(
    paged: tuple[Alert, str],
) -> None:
    alert, run_id = paged
    audits = AuditEvent.objects.count()

    body = pagerduty_event("incident.acknowledged", alert.dedup_key)
    refused = post_pd(body, signed(body, "another-secret-000000000"))
    assert refused.status_code == 403
    tampered = post_pd(body.replace(b"Jane", b"Mall"), signed(body))
    assert tampered.status_code == 403
    alert.refresh_from_db()
    assert (alert.status, AuditEvent.objects.count()) == ("triggered", audits)

    other = pagerduty_event("incident.resolved", alert.dedup_key)
    assert post_pd(other, signed(other)).status_code == 202
    unknown = pagerduty_event("incident.acknowledged", "runledger/other/rule")
    assert post_pd(unknown, signed(unknown)).status_code == 202
    alert.refresh_from_db()
    assert alert.status == "triggered"

    # Two signatures while PagerDuty rotates the secret: either may match.
    answer = post_pd(body, f"v1={'0' * 64}, {signed(body)}")
    assert answer.status_code == 200, answer.content
    assert answer.json()["taken"] == [run_id]
    alert.refresh_from_db()
    assert (alert.status, alert.acked_by) == ("acknowledged", "pagerduty:Jane Doe")
    assert Handover.objects.get(pk=run_id).taken_by == "pagerduty:Jane Doe"
    assert AuditEvent.objects.filter(action="alert_ack", actor="pagerduty:Jane Doe").count() == 1

    repeat = post_pd(body, signed(body))  # PagerDuty delivers at least once
    assert repeat.status_code == 200 and repeat.json()["changed"] is False
    assert AuditEvent.objects.filter(action="alert_ack").count() == 1


def test_an_acknowledgement_in_opsgenie_puts_the_person_with_that_address_on_the_runs(
    paged: tuple[Alert, str],
) -> None:
    alert, run_id = paged
    User.objects.create_user(username="jane", email="Jane@Example.com", password="x" * 16)
    body = {
        "action": "Acknowledge",
        "alert": {"alertId": "8418d193-2dab-4490-b331-8c02cdd196b7", "alias": alert.dedup_key,
                  "message": "refund blocked", "username": "jane@example.com", "tinyId": "7"},
        "source": {"name": "iOS", "type": "mobile"},
        "integrationName": "runledger back",
    }  # fmt: skip

    def post(headers: dict[str, str]) -> Any:
        return Client().post(
            "/hooks/alerts/og", json.dumps(body), content_type="application/json", headers=headers
        )

    assert post({}).status_code == 403
    assert post({"Authorization": "Bearer wrong-secret-00000000"}).status_code == 403
    alert.refresh_from_db()
    assert alert.status == "triggered"
    answer = post({"Authorization": f"Bearer {OG_SECRET}"})
    assert answer.status_code == 200, answer.content
    alert.refresh_from_db()
    assert (alert.status, alert.acked_by) == ("acknowledged", "jane")
    assert Handover.objects.get(pk=run_id).taken_by == "jane"


def test_a_receiver_without_an_inbound_secret_takes_nothing_back(
    paged: tuple[Alert, str], settings: Any
) -> None:
    alert, _ = paged
    for name in ("slack", "nobody"):
        answer = Client().post("/hooks/alerts/" + name, b"{}", content_type="application/json")
        assert answer.status_code == 404
        assert answer["Content-Type"] == "application/problem+json"
    assert Client().get("/hooks/alerts/pd").status_code == 405
    body = b"not json"
    assert post_pd(body, signed(body)).status_code == 400
    alert.refresh_from_db()
    assert alert.status == "triggered"


def test_an_inbound_secret_is_refused_where_it_does_not_belong() -> None:
    from ledger.alert_rules import parse_receivers

    with pytest.raises(ValueError, match="inbound_secret"):
        parse_receivers(json.dumps({"s": {"type": "slack", "url": "https://x.example",
                                          "inbound_secret": "s" * 20}}))  # fmt: skip
    with pytest.raises(ValueError, match="16 characters"):
        parse_receivers(json.dumps({"p": {"type": "pagerduty", "routing_key": "r",
                                          "inbound_secret": "short"}}))  # fmt: skip
