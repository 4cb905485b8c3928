"""POST /api/v1/runs/batch: many runs in one request and one transaction, each with its own
idempotency key; every refusal a problem document that wrote nothing."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.models import AuditEvent, Run
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)


def item(i: int, **extra: Any) -> dict[str, Any]:
    return {"agent": "refund", "inputs": {"invoice_id": f"inv_{i}"}, **extra}


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    doc = answer.json()
    assert doc["status"] == status and doc["detail"]
    return doc


def test_a_batch_is_201_with_each_run_in_order_and_a_repeat_200(caller: Any) -> None:
    shop = caller("operator", name="shop")
    body = {"runs": [item(i, idempotency_key=f"d-{i}", title=f"refund {i}") for i in range(3)]}
    first = shop.post("/api/v1/runs/batch", body)
    assert first.status_code == 201, first.content
    runs = first.json()["runs"]
    assert [r["idempotency_key"] for r in runs] == ["d-0", "d-1", "d-2"]
    assert [r["title"] for r in runs] == ["refund 0", "refund 1", "refund 2"]
    assert all(r["created"] and r["status"] == "queued" and r["webhooks"] == [] for r in runs)
    assert runs[0]["links"]["self"] == f"/api/v1/runs/{runs[0]['run_id']}"
    assert set(Run.objects.values_list("run_id", flat=True)) == {r["run_id"] for r in runs}
    assert set(AuditEvent.objects.values_list("actor", flat=True)) == {"api:shop"}

    again = shop.post("/api/v1/runs/batch", body)
    assert again.status_code == 200
    assert [(r["run_id"], r["created"]) for r in again.json()["runs"]] == [
        (r["run_id"], False) for r in runs
    ]
    mixed = shop.post("/api/v1/runs/batch", {"runs": [item(9), body["runs"][1]]})
    assert mixed.status_code == 201
    answer = mixed.json()["runs"]
    assert [r["created"] for r in answer] == [True, False]
    assert answer[1]["run_id"] == runs[1]["run_id"] and Run.objects.count() == 4


def test_a_conflicting_item_is_409_listing_it_and_nothing_is_written(caller: Any) -> None:
    shop = caller("operator")
    made = shop.post("/api/v1/runs/batch", {"runs": [item(1, idempotency_key="k-1")]})
    assert made.status_code == 201
    before = ledger_rows()
    body = {"runs": [item(5), item(2, idempotency_key="k-1"), item(6)]}
    doc = problem(shop.post("/api/v1/runs/batch", body), 409)
    assert doc["type"].endswith("/batch-refused")
    (error,) = doc["errors"]
    assert (error["index"], error["type"]) == (1, "conflict")
    assert "inputs.invoice_id" in error["message"]
    assert error["current"]["run_id"] == made.json()["runs"][0]["run_id"]
    assert ledger_rows() == before


def test_bad_items_are_422_each_listed_and_nothing_is_written(caller: Any) -> None:
    shop = caller("operator")
    before = ledger_rows()
    body = {
        "runs": [
            item(0),
            {"agent": "no-such-agent", "inputs": {}},
            {"agent": "refund", "inputs": {}},
            item(3, idempotency_key="k-3"),
            item(4, idempotency_key="k-3"),  # the same key with other inputs, in one batch
        ]
    }
    doc = problem(shop.post("/api/v1/runs/batch", body), 422)
    assert [(e["index"], e["type"]) for e in doc["errors"]] == [
        (1, "unknown-agent"),
        (2, "invalid"),
        (4, "conflict"),
    ]
    assert "needs inputs invoice_id" in doc["errors"][1]["message"]
    assert ledger_rows() == before


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"runs": []}, "runs"),
        ({"runs": [item(i) for i in range(1001)]}, "runs"),
        ({"runs": "refund"}, "runs"),
        ({}, "runs"),
        ({"runs": [item(0), item(1, colour="red")]}, "runs[1].colour"),
        ({"runs": [item(0), item(1, run_id="has spaces")]}, "runs[1].run_id"),
        ({"runs": [item(0)], "extra": 1}, "extra"),
    ],
)
def test_an_empty_overlong_or_malformed_batch_is_422_naming_the_field(
    caller: Any, body: dict[str, Any], path: str
) -> None:
    shop = caller("operator")
    doc = problem(shop.post("/api/v1/runs/batch", body), 422)
    assert path in [e["path"] for e in doc["errors"]], doc["errors"]
    assert not Run.objects.exists()


def test_a_body_that_is_not_json_is_a_problem(caller: Any) -> None:
    shop = caller("operator")
    answer = shop.post("/api/v1/runs/batch", raw=b"{not json")
    assert answer.status_code in (400, 422) and answer["Content-Type"] == "application/problem+json"
    assert not Run.objects.exists()


def test_a_viewer_may_not_start_a_batch(caller: Any) -> None:
    viewer = caller("viewer")
    problem(viewer.post("/api/v1/runs/batch", {"runs": [item(0)]}), 403)
    assert not Run.objects.exists()


def test_each_run_of_a_batch_gets_its_own_webhooks_with_their_secrets(caller: Any) -> None:
    shop = caller("operator")
    hook = {"url": "https://shop.example/hooks", "events": ["run.succeeded"]}
    answer = shop.post("/api/v1/runs/batch", {"runs": [item(0), item(1, webhooks=[hook])]})
    assert answer.status_code == 201, answer.content
    first, second = answer.json()["runs"]
    assert first["webhooks"] == []
    (made,) = second["webhooks"]
    assert made["secret"].startswith("whsec_") and made["run_id"] == second["run_id"]
