"""What the API and its documentation promise about a start, as an application sees it:
``created`` on the answer, ``started_at`` once a worker took the run, the agent's declared labels
kept beside the start's own, a repeat with another title, a cancel's ``reason``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from ledger.models import Run
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"agent": "refund", "inputs": {"invoice_id": "inv_1001"}}


def test_a_start_says_created_true_and_its_repeat_created_false(caller: Any) -> None:
    shop = caller("operator")
    first = shop.post("/api/v1/runs", REFUND, HTTP_IDEMPOTENCY_KEY="dispute-1")
    assert first.status_code == 201 and first.json()["created"] is True
    again = shop.post("/api/v1/runs", REFUND, HTTP_IDEMPOTENCY_KEY="dispute-1")
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["run_id"] == first.json()["run_id"] and Run.objects.count() == 1


def test_started_at_is_set_by_the_first_execution_and_kept_by_a_resume(
    caller: Any, execute: Callable[..., Any], crash_at: Callable[..., None], clock: Any
) -> None:
    shop = caller("operator")
    run_id = shop.post("/api/v1/runs", REFUND).json()["run_id"]
    assert shop.get(f"/api/v1/runs/{run_id}").json()["started_at"] is None  # queued
    crash_at("notify.after_effect")
    claimed_at = clock()
    execute(run_id, crash_expected=True)
    first = shop.get(f"/api/v1/runs/{run_id}").json()["started_at"]
    assert first is not None and datetime.fromisoformat(first) == claimed_at
    assert Run.objects.get(pk=run_id).started_at == claimed_at
    execute(run_id, worker="worker-2")  # a resume, later on the clock
    assert clock() > claimed_at
    assert shop.get(f"/api/v1/runs/{run_id}").json()["started_at"] == first


def test_start_labels_are_added_to_the_agents_declared_labels_and_both_are_searchable(
    caller: Any,
) -> None:
    shop = caller("operator")
    body = {**REFUND, "labels": {"dispute": "981"}}
    run = shop.post("/api/v1/runs", body).json()
    assert run["labels"] == {"invoice_id": "inv_1001", "dispute": "981"}
    for search in ("invoice_id:inv_1001", "dispute:981"):
        found = shop.get(f"/api/v1/runs?search={search}").json()["runs"]
        assert [r["run_id"] for r in found] == [run["run_id"]], search
    # On the same key the start's value wins over the one made from the inputs.
    other = {"agent": "refund", "inputs": {"invoice_id": "inv_2"}, "labels": {"invoice_id": "x"}}
    assert shop.post("/api/v1/runs", other).json()["labels"] == {"invoice_id": "x"}


def test_a_repeat_with_another_title_or_labels_is_the_same_start_and_keeps_the_first(
    caller: Any,
) -> None:
    """A title and labels describe a run; they are not part of what makes a start the same
    one (the agent, the inputs, the run id or key): the repeat answers the first run as it is."""
    shop = caller("operator")
    first = {**REFUND, "title": "Refund for dispute 981", "labels": {"dispute": "981"}}
    made = shop.post("/api/v1/runs", first, HTTP_IDEMPOTENCY_KEY="d-981").json()
    before = ledger_rows()
    repeat = {**REFUND, "title": "Another title", "labels": {"dispute": "982"}}
    again = shop.post("/api/v1/runs", repeat, HTTP_IDEMPOTENCY_KEY="d-981")
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["title"] == "Refund for dispute 981"
    assert again.json()["labels"] == made["labels"]
    assert ledger_rows() == before


def test_a_cancel_without_a_reason_is_refused_saying_the_reason_is_required(caller: Any) -> None:
    shop = caller("operator")
    run_id = shop.post("/api/v1/runs", REFUND).json()["run_id"]
    refused = shop.post(f"/api/v1/runs/{run_id}/cancel", {})
    assert refused.status_code == 422
    doc = refused.json()
    assert any(e["path"].endswith("reason") for e in doc["errors"]), doc
    assert "reason" in doc["detail"]
    assert Run.objects.get(pk=run_id).status == "queued"
    done = shop.post(f"/api/v1/runs/{run_id}/cancel", {"reason": "the customer withdrew"})
    assert done.status_code == 200 and done.json()["status"] == "cancelled"
