"""Webhook subscriptions through the HTTP API (subscribe, list, remove) and a run's own
subscriptions made with its start — in the start's transaction, not again on a repeat — through
``POST /api/v1/runs`` and ``ledger.api.start_run``; every refusal writes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from ledger import api as ledger_api
from ledger.errors import InvalidInput
from ledger.models import AuditEvent, Run, WebhookSubscription
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = "https://app.example.com/hooks/runledger"
REFUND = {"agent": "refund", "inputs": {"invoice_id": "inv_1001"}}


def refused(answer: Any, status: int, before: tuple[object, ...]) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert ledger_rows() == before
    return dict(answer.json())


def test_subscribe_list_and_remove_with_the_secret_shown_once(caller: Any) -> None:
    shop = caller("operator", name="shop")
    made = shop.post("/api/v1/webhooks", {"url": HOOK, "agent": "refund", "events": ["run.failed"]})
    assert made.status_code == 201, made.content
    hook = made.json()
    assert hook["secret"].startswith("whsec_") and hook["events"] == ["run.failed"]
    assert hook["secret"] == WebhookSubscription.objects.get().secret
    assert AuditEvent.objects.get(action="webhook_subscribe").actor == "api:shop"
    viewer = caller("viewer")
    listed = viewer.get("/api/v1/webhooks?agent=refund").json()
    assert [h["id"] for h in listed] == [hook["id"]] and "secret" not in listed[0]

    before = ledger_rows()
    for body, says in [
        ({"url": "ftp://app.example.com/x", "agent": "refund"}, "is not an http(s) URL"),
        ({"url": HOOK, "agent": "nobody"}, "no agent named 'nobody'"),
        ({"url": HOOK, "run_id": "run_nope"}, "there is no run"),
        ({"url": HOOK, "agent": "refund", "run_id": "run_nope"}, "either an agent's runs"),
        ({"url": HOOK}, "either an agent's runs"),
    ]:
        assert says in refused(shop.post("/api/v1/webhooks", body), 422, before)["detail"]
    bad_event = {"url": HOOK, "agent": "refund", "events": ["run.exploded"]}
    refused(shop.post("/api/v1/webhooks", bad_event), 422, before)
    refused(viewer.post("/api/v1/webhooks", {"url": HOOK, "agent": "refund"}), 403, before)
    v_auth = {"HTTP_AUTHORIZATION": f"Bearer {viewer.secret}"}
    refused(viewer.client.delete(f"/api/v1/webhooks/{hook['id']}", **v_auth), 403, before)
    refused(viewer.client.delete(f"/api/v1/webhooks/{hook['id']}"), 401, before)

    path = f"/api/v1/webhooks/{hook['id']}"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {shop.secret}"}
    gone = shop.client.delete(path, **auth)
    assert gone.status_code == 200 and gone.json()["removed_by"] == "api:shop"
    before = ledger_rows()
    refused(shop.client.delete(path, **auth), 409, before)
    refused(shop.client.delete("/api/v1/webhooks/999999", **auth), 404, before)
    assert viewer.get("/api/v1/webhooks").json() == []
    assert [h["id"] for h in viewer.get("/api/v1/webhooks?removed=true").json()] == [hook["id"]]


def test_a_start_subscribes_its_run_once_in_its_own_transaction(caller: Any) -> None:
    shop = caller("operator", name="shop")
    body = {**REFUND, "webhooks": [{"url": HOOK, "events": ["run.succeeded"]}]}
    first = shop.post("/api/v1/runs", body, HTTP_IDEMPOTENCY_KEY="dispute-1")
    assert first.status_code == 201, first.content
    run = first.json()
    [hook] = run["webhooks"]
    sub = WebhookSubscription.objects.get()
    assert (sub.run_id, sub.agent, sub.events, sub.secret) == (
        run["run_id"],
        "",
        ["run.succeeded"],
        hook["secret"],
    )
    actions = sorted(AuditEvent.objects.values_list("action", "actor"))
    assert actions == [("run_start", "api:shop"), ("webhook_subscribe", "api:shop")]

    again = shop.post("/api/v1/runs", body, HTTP_IDEMPOTENCY_KEY="dispute-1")
    assert again.status_code == 200 and again.json()["run_id"] == run["run_id"]
    assert again.json()["webhooks"] == [] and WebhookSubscription.objects.count() == 1

    before = ledger_rows()
    for hooks in (
        [{"url": "not a url"}],
        [{"url": HOOK, "events": []}],
        [{"url": HOOK, "events": ["run.exploded"]}],
        [{"url": HOOK, "secret": "mine"}],
        [{"url": HOOK}] * 11,
    ):
        bad = {**REFUND, "inputs": {"invoice_id": "inv_1002"}, "webhooks": hooks}
        refused(shop.post("/api/v1/runs", bad), 422, before)
    assert Run.objects.count() == 1


def test_start_run_in_process_takes_the_same_subscriptions() -> None:
    handle = ledger_api.start_run(
        "refund", {"invoice_id": "inv_1001"}, idempotency_key="k1", webhooks=[{"url": HOOK}]
    )
    [(sub, secret)] = handle.subscriptions
    assert sub.run_id == handle.run_id and secret == sub.secret and len(sub.events) == 4
    again = ledger_api.start_run(
        "refund", {"invoice_id": "inv_1001"}, idempotency_key="k1", webhooks=[{"url": HOOK}]
    )
    assert again.run_id == handle.run_id and again.subscriptions == []
    assert WebhookSubscription.objects.count() == 1

    before = ledger_rows()
    with pytest.raises(InvalidInput, match=r"webhooks\[1\]: .* is not an http\(s\) URL"):
        ledger_api.start_run(
            "refund", {"invoice_id": "inv_2"}, webhooks=[{"url": HOOK}, {"url": "x"}]
        )
    assert ledger_rows() == before
    # The run and its subscriptions are one write: rolled back together.
    with pytest.raises(RuntimeError), transaction.atomic():
        ledger_api.start_run("refund", {"invoice_id": "inv_3"}, webhooks=[{"url": HOOK}])
        assert WebhookSubscription.objects.count() == 2
        raise RuntimeError("the caller's transaction fails")
    assert ledger_rows() == before
