"""The API's alerts and incidents: the rules with their open incidents, one incident, its
acknowledgement (the token's person — here ``api:<name>`` — is then on its runs; a repeat
changes nothing; a resolved one is a 409 problem), the stopped runs grouped by cause, and a
pause with an expiry."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.models import Alert, Handover
from ledger.processes import alerting

pytestmark = pytest.mark.django_db(transaction=True)


def test_alerts_incidents_and_an_acknowledgement_through_the_api(
    caller: Any, blocked: Any, settings: Any
) -> None:
    settings.RUNLEDGER_ALERT_RULES = json.dumps(
        [{"name": "stuck", "kind": "blocked_longer", "minutes": 5, "per": "agent"}]
    )
    run = blocked()
    alerting.alerts_evaluate(clock=lambda: timezone.now() + timedelta(days=1))
    ops, viewer = caller("operator", name="ops"), caller("viewer")
    listed = viewer.get("/api/v1/alerts").json()
    (rule,) = listed["rules"]
    assert (rule["name"], rule["per"], len(rule["open"])) == ("stuck", "agent", 1)
    alert_id = rule["open"][0]["id"]
    assert rule["open"][0]["run_ids"] == [run.run_id]
    assert viewer.get(f"/api/v1/alerts/{alert_id}").json()["dedup_key"] == "runledger/stuck/refund"
    assert viewer.post(f"/api/v1/alerts/{alert_id}/ack").status_code == 403
    assert ops.post("/api/v1/alerts/999999/ack").status_code == 404

    acked = ops.post(f"/api/v1/alerts/{alert_id}/ack")
    assert acked.status_code == 200, acked.content
    body = acked.json()
    assert (body["changed"], body["taken"], body["alert"]["acked_by"]) == (
        True, [run.run_id], "api:ops")  # fmt: skip
    assert Handover.objects.get(pk=run.run_id).taken_by == "api:ops"
    again = ops.post(f"/api/v1/alerts/{alert_id}/ack").json()
    assert (again["changed"], again["taken"]) == (False, [])

    (group,) = viewer.get("/api/v1/incidents?since=7d").json()
    assert (group["agent"], group["step"], group["count"]) == ("refund", "notify", 1)
    assert viewer.get("/api/v1/incidents?since=forever").status_code == 422
    assert viewer.get("/api/v1/incidents?sinse=7d").status_code == 422

    Alert.objects.filter(pk=alert_id).update(status="resolved")  # as the evaluator would
    refused = ops.post(f"/api/v1/alerts/{alert_id}/ack")
    assert refused.status_code == 409 and "resolved" in refused.json()["detail"]

    soon = (timezone.now() + timedelta(hours=1)).isoformat()
    made = ops.post("/api/v1/pauses", {"scope": "agent", "target": "refund", "reason": "down",
                                       "expires_at": soon})  # fmt: skip
    assert made.status_code == 201 and made.json()["expires_at"] is not None
    past = ops.post("/api/v1/pauses", {"scope": "agent", "target": "payout", "reason": "x",
                                       "expires_at": "2020-01-01T00:00:00Z"})  # fmt: skip
    assert past.status_code == 422 and "in the future" in past.json()["detail"]
