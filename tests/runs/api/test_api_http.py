"""The HTTP API in process (Django's test client): starts, reads, waits, actions, settlements,
and every refusal as a problem document that wrote nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from ledger import registry
from ledger.models import AuditEvent, Run, Step
from ledger.processes.execute import run_execute
from runs.api import tokens
from runs.api.models import ApiToken
from runs.api.urls import api
from tests.support.api_rows import EMPTY, ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"agent": "refund", "inputs": {"invoice_id": "inv_1001"}}


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    doc = answer.json()
    assert doc["status"] == status and doc["type"].startswith("https://") and doc["detail"]
    return doc


def test_a_start_is_201_a_repeat_200_and_a_conflicting_repeat_409(caller: Any) -> None:
    shop = caller("operator", name="shop")
    first = shop.post("/api/v1/runs", REFUND, HTTP_IDEMPOTENCY_KEY="dispute-7")
    assert first.status_code == 201
    run = first.json()
    assert run["status"] == "queued" and run["idempotency_key"] == "dispute-7"
    assert run["links"]["dashboard"] == f"/runs/{run['run_id']}/"
    again = shop.post("/api/v1/runs", REFUND, HTTP_IDEMPOTENCY_KEY="dispute-7")
    assert again.status_code == 200 and again.json()["run_id"] == run["run_id"]
    before = ledger_rows()
    other = {"agent": "refund", "inputs": {"invoice_id": "inv_1002"}}
    doc = problem(shop.post("/api/v1/runs", other, HTTP_IDEMPOTENCY_KEY="dispute-7"), 409)
    assert "inputs.invoice_id" in doc["detail"] and doc["current"]["run_id"] == run["run_id"]
    assert ledger_rows() == before
    event = AuditEvent.objects.get()
    assert event.actor == "api:shop" and event.run_id == run["run_id"]


def test_a_run_is_read_waited_for_and_its_steps_listed(caller: Any) -> None:
    shop = caller("operator")
    run_id = shop.post("/api/v1/runs", REFUND).json()["run_id"]
    waited = shop.get(f"/api/v1/runs/{run_id}/wait?timeout=0")
    assert waited.status_code == 200 and waited.json()["settled"] is False
    worker = threading.Thread(target=_execute, args=(run_id,))
    worker.start()
    done = shop.get(f"/api/v1/runs/{run_id}/wait?timeout=60").json()
    worker.join()
    assert done["status"] == "succeeded" and done["settled"] and done["finished"]
    assert done["result"] == Run.objects.get().result
    assert done["plan_version"] == registry.get_agent("refund").plan_version  # type: ignore[union-attr]
    steps = shop.get(f"/api/v1/runs/{run_id}/steps?limit=2").json()
    assert [s["step_id"] for s in steps["steps"]] == ["fetch_invoice", "decided_at"]
    rest = shop.get(f"/api/v1/runs/{run_id}/steps?after={steps['next_cursor']}").json()
    names = [s["step_id"] for s in steps["steps"] + rest["steps"]]
    assert names == list(Step.objects.order_by("seq").values_list("step_id", flat=True))
    assert shop.get(f"/api/v1/runs/{run_id}").json()["status"] == "succeeded"


def _execute(run_id: str) -> None:
    from django.db import connection

    try:
        run_execute(run_id=run_id, worker="test-worker", heartbeat=False)
    finally:
        connection.close()


def test_the_list_filters_and_pages_with_a_cursor(caller: Any) -> None:
    shop = caller("operator")
    ids = [shop.post("/api/v1/runs", REFUND).json()["run_id"] for _ in range(3)]
    page = shop.get("/api/v1/runs?limit=2&status=queued").json()
    assert len(page["runs"]) == 2 and page["next_cursor"]
    rest = shop.get(f"/api/v1/runs?limit=2&status=queued&cursor={page['next_cursor']}").json()
    assert rest["next_cursor"] is None
    assert {r["run_id"] for r in page["runs"] + rest["runs"]} == set(ids)
    assert shop.get("/api/v1/runs?status=succeeded").json()["runs"] == []
    assert shop.get(f"/api/v1/runs?search={ids[0]}").json()["runs"][0]["run_id"] == ids[0]
    problem(shop.get("/api/v1/runs?cursor=nonsense"), 422)
    problem(shop.get("/api/v1/runs?status=bogus"), 422)
    typo = problem(shop.get("/api/v1/runs?stauts=queued"), 422)
    assert typo["errors"][0]["path"] == "stauts" and typo["errors"][0]["in"] == "query"


def test_agents_are_listed_with_what_they_require(caller: Any) -> None:
    agents = {a["name"]: a for a in caller("viewer").get("/api/v1/agents").json()}
    assert agents["refund"]["requires"] == ["invoice_id"]
    assert agents["refund"]["plan_version"] == registry.get_agent("refund").plan_version  # type: ignore[union-attr]


def test_cancel_and_a_refused_retry_are_the_dashboards_transitions(caller: Any) -> None:
    shop = caller("operator", name="shop")
    run_id = shop.post("/api/v1/runs", REFUND).json()["run_id"]
    before = ledger_rows()
    doc = problem(shop.post(f"/api/v1/runs/{run_id}/retry", {"reason": "again"}), 409)
    assert "retry applies to a run that is failed" in doc["detail"]
    assert ledger_rows() == before
    stale = problem(
        shop.post(f"/api/v1/runs/{run_id}/cancel", {"reason": "x", "seen_version": 99}), 409
    )
    assert stale["type"].endswith("/conflict") and ledger_rows() == before
    answer = shop.post(f"/api/v1/runs/{run_id}/cancel", {"reason": "the customer withdrew"})
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    assert AuditEvent.objects.filter(action="run_cancel", actor="api:shop").count() == 1
    assert shop.get(f"/api/v1/runs/{run_id}/wait?timeout=5").json()["settled"]


def test_a_settlement_needs_a_second_person_and_a_persons_token(caller: Any, blocked: Any) -> None:
    run = blocked()
    step = Step.objects.get(run=run, step_id="notify")
    alice = caller("operator", user="alice")
    waiting = alice.get("/api/v1/settlements").json()
    assert [(w["run_id"], w["step_id"]) for w in waiting] == [(run.run_id, "notify")]
    body = {
        "outcome": "not_happened",
        "reason": "no message in #billing",
        "seen_version": step.version,
    }
    made = alice.post(f"/api/v1/runs/{run.run_id}/steps/{step.pk}/settlements", body)
    assert made.status_code == 201 and made.json()["status"] == "proposed"
    pk = made.json()["id"]
    # A service's approver token cannot exist, and an operator may not approve.
    with pytest.raises(ValueError, match="acts for a person"):
        tokens.token_create(name="robot", role="approver")
    problem(alice.post(f"/api/v1/settlements/{pk}/approve", {}), 403)
    # Alice holding an approver token too: still the proposer (four eyes).
    alice_approves = caller("approver", user="alice", name="alice-approver")
    before = ledger_rows()
    problem(alice_approves.post(f"/api/v1/settlements/{pk}/approve", {}), 403)
    assert ledger_rows() == before
    # A person's token whose user lost the approver role is refused too.
    bob = caller("approver", user="bob")
    from django.contrib.auth.models import User

    from runs.dashboard.roles import user_set_role

    user_set_role(user=User.objects.get(username="bob"), role="viewer")
    problem(bob.post(f"/api/v1/settlements/{pk}/approve", {}), 403)
    user_set_role(user=User.objects.get(username="bob"), role="approver")
    done = bob.post(f"/api/v1/settlements/{pk}/approve", {"reason": "checked"})
    assert done.status_code == 200 and done.json()["status"] == "applied"
    assert Run.objects.get(pk=run.run_id).status == "queued"
    event = AuditEvent.objects.get(action="settlement_approve")
    assert event.actor == "bob"


@pytest.mark.parametrize(
    ("raw", "status", "kind", "says"),
    [
        (b'{"agent": "refund", "inputs": {', 400, "bad-json", "line 1 column"),
        (b"\xff\xfe", 400, "bad-json", "line 1 column 1"),
        (b'{"inputs": {}}', 422, "validation", "agent: required"),
        (b'{"agent": "refund", "inputs": {}, "colour": 1}', 422, "validation", "colour"),
        (b'{"agent": "refund", "inputs": {}}', 422, "invalid-input", "needs inputs invoice_id"),
        (b'{"agent": "refnud", "inputs": {}}', 422, "unknown-agent", "refnud"),
        (b'{"agent": "refund", "run_id": "../x", "inputs": {}}', 422, "validation", "run_id"),
        (b'{"agent": "refund", "inputs": {"a": NaN}}', 400, "bad-json", "NaN"),
    ],
)
def test_bad_starts_are_problems_that_write_nothing(
    caller: Any, raw: bytes, status: int, kind: str, says: str
) -> None:
    shop = caller("operator")
    before = ledger_rows()
    doc = problem(shop.post("/api/v1/runs", raw=raw), status)
    assert doc["type"].endswith("/" + kind), doc
    assert says in doc["detail"] or says in json.dumps(doc.get("errors")), doc
    assert ledger_rows() == before


@override_settings(RUNLEDGER_API_MAX_BODY_BYTES=1000)
def test_a_body_over_the_limit_is_413(caller: Any) -> None:
    shop = caller("operator")
    big = {"agent": "refund", "inputs": {"invoice_id": "x" * 2000}}
    doc = problem(shop.post("/api/v1/runs", big), 413)
    assert "1000 bytes" in doc["detail"] and ledger_rows() == EMPTY


def test_no_token_a_wrong_one_and_a_revoked_one_are_401(client: Any, caller: Any) -> None:
    problem(client.get("/api/v1/runs"), 401)
    problem(client.get("/api/v1/runs", HTTP_AUTHORIZATION="Bearer rl_nonsense"), 401)
    problem(client.get("/api/v1/runs", HTTP_AUTHORIZATION="Token abc"), 401)
    shop = caller("operator", name="shop")
    assert shop.get("/api/v1/runs").status_code == 200
    tokens.token_revoke(name="shop")
    problem(shop.get("/api/v1/runs"), 401)
    problem(shop.post("/api/v1/runs", REFUND), 401)
    assert ledger_rows() == EMPTY


def test_a_token_is_stored_as_a_digest_and_its_use_recorded(caller: Any) -> None:
    shop = caller("viewer", name="reader")
    row = ApiToken.objects.get(name="reader")
    assert shop.secret not in json.dumps(list(ApiToken.objects.values()), default=str)
    assert row.digest == tokens.digest(shop.secret) and row.last_used_at is None
    shop.get("/api/v1/agents")
    row.refresh_from_db()
    assert row.last_used_at is not None


@override_settings(RUNLEDGER_API_RATE="3/m")
def test_too_many_requests_for_one_token_is_429_with_retry_after(caller: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    shop, other = caller("operator", name="busy"), caller("operator", name="calm")
    for _ in range(3):
        assert shop.get("/api/v1/agents").status_code == 200
    answer = shop.post("/api/v1/runs", REFUND)
    problem(answer, 429)
    assert int(answer["Retry-After"]) >= 1 and ledger_rows() == EMPTY
    assert other.get("/api/v1/agents").status_code == 200  # counted per token


def test_the_served_openapi_document_is_the_committed_one(client: Any) -> None:
    served = client.get("/api/v1/openapi.json")
    assert served.status_code == 200
    committed = Path(__file__).parents[3] / "docs" / "openapi.json"
    assert json.loads(committed.read_text()) == served.json(), (
        "docs/openapi.json is out of date: manage.py export_openapi > docs/openapi.json"
    )
    expected = json.loads(json.dumps(api.get_openapi_schema(path_prefix="/api/v1/")))
    assert served.json() == expected


def test_create_api_token_prints_the_token_once_and_revoke_stops_it(client: Any) -> None:
    from io import StringIO

    from django.core.management import call_command

    out, err = StringIO(), StringIO()
    call_command("create_api_token", "--name", "ci", "--role", "viewer", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert secret.startswith("rl_") and "shown only once" in err.getvalue()
    ok = client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert ok.status_code == 200
    call_command("revoke_api_token", "ci", stdout=StringIO())
    problem(client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {secret}"), 401)
