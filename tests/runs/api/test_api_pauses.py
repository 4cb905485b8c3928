"""Pauses, executions and failed attempts, and accepting a stale step through the HTTP API:
the transitions' refusals as problems that write nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger import registry
from ledger.agents import agent, tool
from ledger.models import AuditEvent, Pause, Run, Step
from ledger.processes.execute import run_execute
from tests.support.api_rows import ledger_rows
from tests.support.dashboard_runs import stale_run

pytestmark = pytest.mark.django_db(transaction=True)


def refused(answer: Any, status: int, before: tuple[object, ...]) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert ledger_rows() == before
    return dict(answer.json())


def test_a_pause_holds_a_run_and_its_lift_queues_it_with_the_count_shown(caller: Any) -> None:
    ops = caller("operator", name="ops")
    made = ops.post(
        "/api/v1/pauses", {"scope": "agent", "target": "refund", "reason": "provider down"}
    )
    assert made.status_code == 201, made.content
    pause = made.json()
    assert (pause["scope"], pause["target"], pause["active"], pause["held"]) == (
        "agent",
        "refund",
        True,
        0,
    )
    assert AuditEvent.objects.get(action="pause").actor == "api:ops"

    before = ledger_rows()
    body = {"scope": "agent", "target": "refund", "reason": "again"}
    assert "already paused" in refused(ops.post("/api/v1/pauses", body), 409, before)["detail"]
    unknown = {"scope": "tool", "target": "no_such_tool", "reason": "x"}
    assert "no tool named" in refused(ops.post("/api/v1/pauses", unknown), 422, before)["detail"]
    refused(
        ops.post("/api/v1/pauses", {"scope": "galaxy", "target": "x", "reason": "x"}), 422, before
    )
    refused(
        ops.post("/api/v1/pauses", {"scope": "run", "target": "run_nope", "reason": "x"}),
        422,
        before,
    )
    refused(ops.post("/api/v1/pauses", {"scope": "tool", "target": "send_email"}), 422, before)
    viewer = caller("viewer")
    refused(viewer.post("/api/v1/pauses", {**unknown, "target": "send_email"}), 403, before)

    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert run_execute(run_id=run.run_id, worker="w1", heartbeat=False).status == "paused"
    assert viewer.get(f"/api/v1/runs/{run.run_id}").json()["status"] == "paused"
    paused = viewer.get("/api/v1/runs?status=paused").json()["runs"]
    assert [r["run_id"] for r in paused] == [run.run_id]
    assert viewer.get(f"/api/v1/pauses/{pause['id']}").json()["held"] == 1
    assert [p["id"] for p in viewer.get("/api/v1/pauses").json()] == [pause["id"]]

    before = ledger_rows()
    lift = f"/api/v1/pauses/{pause['id']}/lift"
    moved = refused(ops.post(lift, {"reason": "back", "expected": 0}), 409, before)
    assert "holds 1 runs now, not the 0" in moved["detail"]
    refused(ops.post(lift, {"reason": "back"}), 422, before)  # the count is required
    refused(viewer.post(lift, {"reason": "back", "expected": 1}), 403, before)
    refused(ops.post("/api/v1/pauses/999999/lift", {"reason": "x", "expected": 0}), 404, before)
    lifted = ops.post(lift, {"reason": "provider back", "expected": 1})
    assert lifted.status_code == 200, lifted.content
    assert (lifted.json()["active"], lifted.json()["requeued"]) == (False, 1)
    assert Run.objects.get(pk=run.run_id).status == "queued"
    assert AuditEvent.objects.get(action="unpause").actor == "api:ops"
    before = ledger_rows()
    refused(ops.post(lift, {"reason": "again", "expected": 0}), 409, before)
    assert viewer.get("/api/v1/pauses").json() == []
    assert [p["id"] for p in viewer.get("/api/v1/pauses?active=false").json()] == [pause["id"]]

    assert run_execute(run_id=run.run_id, worker="w2", heartbeat=False).status == "succeeded"
    rows = viewer.get(f"/api/v1/runs/{run.run_id}/executions").json()
    assert [(e["number"], e["worker"], e["ending"]) for e in rows] == [
        (1, "w1", "paused"),
        (2, "w2", "finished"),
    ]
    assert rows[1]["executed"] >= 1 and rows[1]["seconds"] is not None
    assert viewer.get("/api/v1/runs/run_nope/executions").status_code == 404
    assert Pause.objects.get().requeued == 1


CALLS: list[int] = []


class QuotaExceeded(Exception):
    pass


@tool(kind="read", name="wire-balance", retries=2, backoff=0.25, jitter=0.0)
def read_balance(account: str) -> Any:
    CALLS.append(1)
    if len(CALLS) < 3:
        raise QuotaExceeded(f"quota of {account} exceeded (call {len(CALLS)})")
    return {"balance": 12}


@agent("wire-balance-agent", tools=[read_balance])
def balance_agent(ctx: Any, inputs: Any) -> Any:
    return ctx.call(read_balance, step="balance", account="acct_7")


@pytest.fixture
def flaky() -> Iterator[None]:
    CALLS.clear()
    registry._agents["wire-balance-agent"] = balance_agent
    yield
    registry.unregister_agent("wire-balance-agent")


def test_the_steps_carry_their_failed_attempts(caller: Any, execute: Any, flaky: None) -> None:
    run = start_unannounced(agent="wire-balance-agent", inputs={})
    assert execute(run.run_id).status == "succeeded"
    [step] = caller("viewer").get(f"/api/v1/runs/{run.run_id}/steps").json()["steps"]
    assert step["status"] == "succeeded" and step["attempt"] == 3
    failures = step["failures"]
    assert [(f["attempt"], f["type"].rsplit(".")[-1], f["final"]) for f in failures] == [
        (1, "QuotaExceeded", False),
        (2, "QuotaExceeded", False),
    ]
    assert failures[0]["message"] == "quota of acct_7 exceeded (call 1)"
    assert "read_balance" in failures[0]["traceback"] and failures[0]["retry_at"]


def test_a_stale_step_is_accepted_through_the_api(
    caller: Any, execute: Any, clock: Any, crash_at: Any, monkeypatch: Any
) -> None:
    execute.clock = clock  # the run builders start runs on the execution's clock
    run = stale_run(execute, crash_at, monkeypatch)
    decide = Step.objects.get(run=run, step_id="decide")
    fetch = Step.objects.get(run=run, step_id="fetch_invoice")
    ops = caller("operator", name="ops")
    path = f"/api/v1/runs/{run.run_id}/steps/{decide.pk}/accept-stale"
    before = ledger_rows()
    moved = {"reason": "same meaning", "seen_version": decide.version + 5}
    refused(ops.post(path, moved), 409, before)
    other = f"/api/v1/runs/{run.run_id}/steps/{fetch.pk}/accept-stale"
    assert "not stale" in refused(ops.post(other, {"reason": "x"}), 409, before)["detail"]
    refused(ops.post(path, {}), 422, before)  # a reason is required
    refused(caller("viewer").post(path, {"reason": "x"}), 403, before)
    refused(
        ops.post(f"/api/v1/runs/{run.run_id}/steps/999999/accept-stale", {"reason": "x"}),
        404,
        before,
    )
    refused(
        ops.post(f"/api/v1/runs/run_nope/steps/{decide.pk}/accept-stale", {"reason": "x"}),
        404,
        before,
    )

    done = ops.post(path, {"reason": "the new prompt means the same"})
    assert done.status_code == 200, done.content
    assert done.json()["run"]["status"] == "queued" and done.json()["step"]["step_id"] == "decide"
    decide.refresh_from_db()
    assert decide.version > moved["seen_version"] - 5
    event = AuditEvent.objects.get(action="stale_accept")
    assert (event.actor, event.step_id) == ("api:ops", "decide")
    assert execute(run.run_id).status == "succeeded"


def test_the_schemas_name_every_status_reason_and_event_of_the_ledger() -> None:
    from typing import get_args

    from ledger.states import Reason, RunStatus
    from ledger.webhooks import EVENT_TYPES
    from runs.api.schemas import EventName, ReasonName, RunStatusName

    assert set(get_args(RunStatusName)) == set(RunStatus.values)
    assert set(get_args(ReasonName)) == set(Reason.values) - {""}
    assert get_args(EventName) == EVENT_TYPES
