"""Roles by endpoints: every operation of the OpenAPI document tried with no token, a revoked
token and each role; a refused one (401/403) writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import events, transitions
from ledger.models import Alert, Gate, Step
from ledger.processes.execute import run_execute
from runs.api import tokens
from runs.api.urls import api
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

#: Which roles may call each operation (by method and path template).
ALLOWED: dict[tuple[str, str], set[str]] = {
    ("get", "/api/v1/"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/runs"): {"operator"},
    ("post", "/api/v1/runs/batch"): {"operator"},
    ("get", "/api/v1/runs"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/runs/{run_id}"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/runs/{run_id}/wait"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/runs/{run_id}/stream"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/runs/{run_id}/steps"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/runs/{run_id}/resume"): {"operator"},
    ("post", "/api/v1/runs/{run_id}/retry"): {"operator"},
    ("post", "/api/v1/runs/{run_id}/cancel"): {"operator"},
    ("get", "/api/v1/agents"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/agents/usage"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/settlements"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/settlements/{pk}"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/runs/{run_id}/steps/{step}/settlements"): {"operator"},
    ("post", "/api/v1/settlements/{pk}/approve"): {"approver"},
    # An operator may withdraw only their own proposal: this one is someone else's.
    ("post", "/api/v1/settlements/{pk}/reject"): {"approver"},
    ("get", "/api/v1/runs/{run_id}/executions"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/runs/{run_id}/steps/{step}/accept-stale"): {"operator"},
    ("get", "/api/v1/approvals"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/approvals/{gate_id}"): {"viewer", "operator", "approver"},
    # A gate's decision is a person's: an approver token of a user (the caller's here).
    ("post", "/api/v1/approvals/{gate_id}/approve"): {"approver"},
    ("post", "/api/v1/approvals/{gate_id}/reject"): {"approver"},
    ("get", "/api/v1/pauses"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/pauses"): {"operator"},
    ("get", "/api/v1/pauses/{pause_id}"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/pauses/{pause_id}/lift"): {"operator"},
    ("get", "/api/v1/webhooks"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/webhooks"): {"operator"},
    ("delete", "/api/v1/webhooks/{subscription_id}"): {"operator"},
    ("get", "/api/v1/runs/{run_id}/handover"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/runs/{run_id}/take"): {"operator"},
    ("post", "/api/v1/runs/{run_id}/release"): {"operator"},
    ("post", "/api/v1/runs/{run_id}/notes"): {"operator"},
    ("post", "/api/v1/runs/{run_id}/events"): {"operator"},
    # An answer to ctx.ask is a person's (the approver's token here is one); the question's
    # role is checked against that person (tests/runs/api/test_api_answers.py).
    ("post", "/api/v1/runs/{run_id}/answer"): {"approver"},
    ("get", "/api/v1/alerts"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/alerts/{alert_id}"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/alerts/{alert_id}/ack"): {"operator"},
    ("get", "/api/v1/incidents"): {"viewer", "operator", "approver"},
    ("get", "/api/v1/schedules"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/schedules"): {"operator"},
    ("get", "/api/v1/schedules/{schedule}"): {"viewer", "operator", "approver"},
    ("post", "/api/v1/schedules/{schedule}/pause"): {"operator"},
    ("post", "/api/v1/schedules/{schedule}/resume"): {"operator"},
    ("delete", "/api/v1/schedules/{schedule}"): {"operator"},
}

BODIES: dict[str, dict[str, Any]] = {
    "/api/v1/runs": {"agent": "refund", "inputs": {"invoice_id": "inv_1001"}},
    "/runs/batch": {"runs": [{"agent": "refund", "inputs": {"invoice_id": "inv_1001"}}]},
    "/resume": {"reason": "go on"},
    "/retry": {"reason": "go on"},
    "/cancel": {"reason": "stop"},
    "/settlements": {"outcome": "abandon", "reason": "gone", "seen_version": 0},
    "/approve": {"reason": "ok"},
    "/reject": {"reason": "no"},
    "/accept-stale": {"reason": "same meaning"},
    "/api/v1/pauses": {"scope": "tool", "target": "send_email", "reason": "provider down"},
    "/lift": {"reason": "provider back", "expected": 0},
    "/api/v1/webhooks": {"url": "http://127.0.0.1:9/hooks", "agent": "refund"},
    "/take": {"seen_holder": ""},
    "/notes": {"text": "looked at it", "key": "role-test"},
    "/events": {"name": "reply", "payload": 1, "event_id": "role-test"},
    "/answer": {"answer": {"approve": True}},
    "/api/v1/schedules": {
        "name": "role-test",
        "agent": "refund",
        "interval": 3600,
        "inputs": {"invoice_id": "inv_1001"},
    },
}


def operations() -> list[tuple[str, str]]:
    doc = api.get_openapi_schema(path_prefix="/api/v1/")
    return [(m, p) for p, ops in doc["paths"].items() for m in ops]


def test_every_operation_has_a_row_in_the_table() -> None:
    assert sorted(operations()) == sorted(ALLOWED)


@pytest.fixture
def world(caller: Any, blocked: Any) -> dict[str, Any]:
    run = blocked()
    step = Step.objects.get(run=run, step_id="notify")
    carol = caller("operator", user="carol", name="carol")
    made = carol.post(
        f"/api/v1/runs/{run.run_id}/steps/{step.pk}/settlements",
        {"outcome": "not_happened", "reason": "not sent", "seen_version": step.version},
    )
    assert made.status_code == 201, made.content
    gated = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    waiting = run_execute(run_id=gated.run_id, worker="worker-1", heartbeat=False)
    assert waiting.reason == "approval", waiting
    pause = transitions.pause_create(scope="agent", target="refund", by="ops", reason="down")
    hook, _ = events.subscribe("http://127.0.0.1:9/app", agent="payout")
    alert = Alert.objects.create(rule="stuck", dedup_key="runledger/stuck/all", summary="stuck",
                                 opened_at=timezone.now(), seen_at=timezone.now())  # fmt: skip
    nightly = transitions.schedule_add(
        name="nightly",
        agent="refund",
        inputs={"invoice_id": "inv_1001"},
        cron="0 3 * * *",
        by="ops",
    )
    return {
        "alert_id": alert.pk,
        "run_id": run.run_id,
        "step": step.pk,
        "pk": made.json()["id"],
        "gate_id": Gate.objects.get(run_id=gated.run_id).pk,
        "pause_id": pause.pk,
        "subscription_id": hook.pk,
        "schedule": nightly.schedule_id,
    }


def _call(client: Any, header: str | None, method: str, template: str, world: dict[str, Any]):
    path = template.format(**world)
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    if method == "get":
        query = "?timeout=0" if path.endswith("/wait") else ""
        answer = client.get(path + query, **extra)
        answer.close()  # a stream (never read here) gives its place back
        return answer
    if method == "delete":
        return client.delete(path, **extra)
    body = next((b for suffix, b in BODIES.items() if template.endswith(suffix)), {})
    return client.post(path, data=json.dumps(body), content_type="application/json", **extra)


def test_no_token_and_a_revoked_token_are_refused_everywhere(
    client: Any, caller: Any, world: dict[str, Any]
) -> None:
    revoked = caller("operator", name="gone")
    tokens.token_revoke(name="gone")
    before = ledger_rows()
    for method, template in operations():
        for header in (None, f"Bearer {revoked.secret}", "Bearer rl_wrong"):
            answer = _call(client, header, method, template, world)
            assert answer.status_code == 401, (method, template, header, answer.content)
            assert answer["Content-Type"] == "application/problem+json"
    assert ledger_rows() == before


@pytest.mark.parametrize("role", ["viewer", "operator", "approver"])
def test_each_role_may_do_what_its_row_says_and_nothing_else(
    client: Any, caller: Any, world: dict[str, Any], role: str
) -> None:
    who = caller(role, user=f"{role}-person" if role == "approver" else None)
    for method, template in operations():
        before = ledger_rows()
        answer = _call(client, f"Bearer {who.secret}", method, template, world)
        allowed = role in ALLOWED[(method, template)]
        if allowed:
            assert answer.status_code not in (401, 403, 500), (template, answer.content)
        else:
            assert answer.status_code == 403, (method, template, role, answer.content)
            assert ledger_rows() == before, (method, template, role)
