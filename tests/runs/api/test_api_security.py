"""The HTTP API tried as a hostile user would (issue 30, security): a token acts no further than
its person's role of the moment; a webhook URL that points inside the network is refused at
subscription (the delivery side is tests/ledger/processes/test_webhook_egress.py); text
PostgreSQL cannot hold is a 4xx; a wrong method or path under ``/api/v1/`` is a problem
document; a refusal names the field as it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from ledger.models import AuditEvent, Pause, Settlement, WebhookSubscription
from runs.dashboard.roles import user_set_role
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"agent": "refund", "inputs": {"invoice_id": "inv_1001"}}


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json", answer.content
    doc = answer.json()
    assert doc["status"] == status and doc["detail"]
    return dict(doc)


# --- 1. a token never acts beyond its person's role of the moment ---------------------------


def test_an_operator_token_of_a_person_demoted_to_viewer_cannot_pause(caller: Any) -> None:
    carol = caller("operator", user="carol", name="carol")
    user_set_role(user=User.objects.get(username="carol"), role="viewer")
    before = ledger_rows()
    doc = problem(carol.post("/api/v1/pauses", {"scope": "agent", "target": "refund",
                                                "reason": "down"}), 403)  # fmt: skip
    assert "viewer" in doc["detail"], doc
    assert not Pause.objects.exists() and not AuditEvent.objects.exists()
    assert ledger_rows() == before
    assert carol.get("/api/v1/runs").status_code == 200  # a viewer still reads


def test_an_approver_token_of_a_person_demoted_to_viewer_cannot_reject(
    caller: Any, blocked: Any
) -> None:
    run = blocked()
    step = run.steps.get(step_id="notify")
    carol = caller("operator", user="carol", name="carol")
    made = carol.post(
        f"/api/v1/runs/{run.run_id}/steps/{step.pk}/settlements",
        {"outcome": "not_happened", "reason": "not sent", "seen_version": step.version},
    )
    assert made.status_code == 201, made.content
    bob = caller("approver", user="bob", name="bob")
    user_set_role(user=User.objects.get(username="bob"), role="viewer")
    problem(bob.post(f"/api/v1/settlements/{made.json()['id']}/reject", {"reason": "no"}), 403)
    assert Settlement.objects.get().status == "proposed"


def test_a_token_keeps_its_own_role_when_its_person_holds_more(caller: Any) -> None:
    viewer = caller("viewer", user="dan", name="dan")
    user_set_role(user=User.objects.get(username="dan"), role="admin")
    problem(viewer.post("/api/v1/runs", REFUND), 403)


def test_the_tokens_of_a_deactivated_person_fail(caller: Any) -> None:
    carol = caller("operator", user="carol", name="carol")
    assert carol.get("/api/v1/runs").status_code == 200
    User.objects.filter(username="carol").update(is_active=False)
    problem(carol.get("/api/v1/runs"), 401)


# --- 2. webhook URLs that point inside the network are refused at subscription -------------

INSIDE = [
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://[fd00:ec2::254]/latest/",
    "http://10.0.0.1/hook",
    "http://192.168.1.1/hook",
    "http://172.16.0.1/hook",
    "http://100.64.0.1/hook",
    "http://127.0.0.1:8000/hook",
    "http://localhost/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0/hook",
    "http://224.0.0.1/hook",
    "http://[fe80::1]/hook",
    "https://user:pw@app.example.com/hook",
    "https://runledger.example.com/hook",  # the API's own host (RUNLEDGER_PUBLIC_URL)
]


@override_settings(
    RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS=[], RUNLEDGER_PUBLIC_URL="https://runledger.example.com"
)
@pytest.mark.parametrize("url", INSIDE)
def test_a_webhook_inside_the_network_is_refused_through_the_api(caller: Any, url: str) -> None:
    shop = caller("operator", name="shop")
    before = ledger_rows()
    doc = problem(shop.post("/api/v1/webhooks", {"url": url, "agent": "refund"}), 422)
    assert "refused as a webhook" in doc["detail"], doc
    start = shop.post("/api/v1/runs", {**REFUND, "webhooks": [{"url": url}]})
    problem(start, 422)
    assert ledger_rows() == before and not WebhookSubscription.objects.exists()


def test_ledger_api_start_run_refuses_a_webhook_inside_the_network(settings: Any) -> None:
    from ledger import api as ledger_api
    from ledger.errors import InvalidInput

    settings.RUNLEDGER_WEBHOOK_ALLOWED_NETWORKS = []
    before = ledger_rows()
    with pytest.raises(InvalidInput, match=r"webhooks\[0\]: .* refused as a webhook.*link-local"):
        ledger_api.start_run(
            "refund", {"invoice_id": "inv_1"}, webhooks=[{"url": "http://169.254.169.254/"}]
        )
    assert ledger_rows() == before


# --- 4. text PostgreSQL cannot hold is a 4xx, wherever it is sent ---------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/pauses", {"scope": "tool", "target": "send\u0000mail", "reason": "down"}),
        ("/api/v1/pauses", {"scope": "tool", "target": "send_mail", "reason": "do\u0000wn"}),
        ("/api/v1/runs", {"agent": "refund", "inputs": {"invoice_id": "inv\u00001"}}),
        ("/api/v1/runs", {"agent": "refund", "inputs": {"k\u0000": "v"}}),
        ("/api/v1/runs", {**REFUND, "title": "a\u0000b"}),
        ("/api/v1/runs", {**REFUND, "labels": {"team": "x\ud800"}}),
        ("/api/v1/webhooks", {"url": "https://app.example.com/\u0000", "agent": "refund"}),
    ],
)
def test_text_the_database_cannot_hold_is_a_4xx_that_writes_nothing(
    caller: Any, path: str, body: dict[str, Any]
) -> None:
    shop = caller("operator", name="shop")
    before = ledger_rows()
    doc = problem(shop.post(path, raw=json.dumps(body).encode()), 422)
    assert "NUL" in doc["detail"] or "surrogate" in doc["detail"], doc
    assert ledger_rows() == before


def test_a_nul_in_a_query_or_a_path_is_a_4xx(caller: Any) -> None:
    shop = caller("operator", name="shop")
    problem(shop.get("/api/v1/runs?agent=re%00fund"), 422)
    problem(shop.get("/api/v1/runs/run_%00x"), 422)
    problem(shop.get("/api/v1/pauses?active=%00"), 422)


# --- 5. a wrong method or path under /api/v1/ is a problem document -------------------------


def test_a_wrong_method_is_a_405_problem_with_allow(caller: Any) -> None:
    shop = caller("operator", name="shop")
    answer = shop.client.put("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {shop.secret}")
    doc = problem(answer, 405)
    assert doc["type"].endswith("/method-not-allowed")
    assert set(answer["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}


def test_an_unknown_path_is_a_404_problem_with_or_without_a_token(client: Any, caller: Any) -> None:
    shop = caller("operator", name="shop")
    doc = problem(shop.get("/api/v1/no-such-thing"), 404)
    assert doc["type"].endswith("/not-found")
    problem(client.get("/api/v1/runs/x/y/z"), 404)
    problem(client.post("/api/v1/nothing/here"), 404)


# --- 7. a refusal names the field as the user sent it ---------------------------------------


def test_a_missing_field_is_named_as_sent(caller: Any) -> None:
    shop = caller("operator", name="shop")
    doc = problem(shop.post("/api/v1/pauses", {"scope": "tool", "target": "t"}), 422)
    assert doc["detail"] == "reason: required", doc
    assert doc["errors"] == [
        {"path": "reason", "in": "body", "message": "required", "type": "missing"}
    ]


def test_a_value_outside_a_choice_lists_the_choices(caller: Any) -> None:
    shop = caller("operator", name="shop")
    doc = problem(shop.get("/api/v1/runs?status=done"), 422)
    assert doc["detail"] == (
        "status: must be one of queued, running, needs_attention, paused, succeeded, failed, "
        "cancelled, lease_expired"
    ), doc
    assert [e["path"] for e in doc["errors"]] == ["status"]
    assert doc["errors"][0]["in"] == "query"


def test_a_nested_field_is_named_by_its_place_in_the_body(caller: Any) -> None:
    shop = caller("operator", name="shop")
    doc = problem(shop.post("/api/v1/runs", {**REFUND, "webhooks": [{"events": ["x"]}]}), 422)
    paths = [e["path"] for e in doc["errors"]]
    assert "webhooks[0].url" in paths and "webhooks[0].events[0]" in paths, doc
    assert "body.body" not in doc["detail"] and "literal[" not in doc["detail"]
