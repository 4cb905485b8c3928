"""``/api/v1/schedules``: operators add, pause, resume and remove (audited as the token), viewers
read; every refusal is a problem document and writes nothing; the runs a schedule started are
listed with ``GET /runs?schedule=``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from ledger.models import AuditEvent, Run, Schedule
from ledger.processes.schedules import schedules_tick
from tests.support import paced_agents  # noqa: F401 - registers the agents

pytestmark = pytest.mark.django_db(transaction=True)

BODY = {"name": "every-minute", "agent": "paced-free", "inputs": {"seconds": 0}, "interval": 60}


def _rows() -> tuple[int, int]:
    return Schedule.objects.count(), AuditEvent.objects.count()


def refused(answer: Any, status: int, before: tuple[int, int]) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    assert _rows() == before
    return dict(answer.json())


def test_add_read_pause_resume_remove_and_list_its_runs(caller: Any) -> None:
    ops = caller("operator", name="ops")
    made = ops.post("/api/v1/schedules", {**BODY, "missed": "each", "priority": 4})
    assert made.status_code == 201, made.content
    schedule = made.json()
    sid = schedule["id"]
    assert sid.startswith("sch_") and schedule["interval"] == 60 and schedule["cron"] is None
    assert (schedule["missed"], schedule["priority"], schedule["paused"]) == ("each", 4, False)
    assert AuditEvent.objects.get(action="schedule_add").actor == "api:ops"

    viewer = caller("viewer")
    listed = viewer.get("/api/v1/schedules")
    assert listed.status_code == 200 and [s["id"] for s in listed.json()] == [sid]
    assert viewer.get("/api/v1/schedules/every-minute").json()["id"] == sid  # by name
    assert viewer.get(f"/api/v1/schedules/{sid}").json()["name"] == "every-minute"

    tick = Schedule.objects.get().next_at
    (run_id,) = schedules_tick(clock=lambda: tick + timedelta(seconds=1))
    page = viewer.get(f"/api/v1/runs?schedule={sid}").json()
    assert [r["run_id"] for r in page["runs"]] == [run_id]
    assert viewer.get("/api/v1/runs?schedule=sch_other").json()["runs"] == []
    assert viewer.get(f"/api/v1/runs/{run_id}").json()["schedule"] == sid
    assert viewer.get(f"/api/v1/schedules/{sid}").json()["last_run_id"] == run_id

    paused = ops.post(f"/api/v1/schedules/{sid}/pause", {"reason": "maintenance"})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert paused.json()["next_at"] is None
    before = _rows()
    again = refused(ops.post(f"/api/v1/schedules/{sid}/pause", {}), 409, before)
    assert "paused already" in again["detail"]
    resumed = ops.post(f"/api/v1/schedules/{sid}/resume", {})
    assert resumed.status_code == 200 and resumed.json()["next_at"] is not None
    bearer = f"Bearer {ops.secret}"
    removed = ops.client.delete(f"/api/v1/schedules/{sid}", HTTP_AUTHORIZATION=bearer)
    assert removed.status_code == 200 and removed.json()["removed"] is True
    assert viewer.get("/api/v1/schedules").json() == []
    assert [s["id"] for s in viewer.get("/api/v1/schedules?removed=true").json()] == [sid]
    gone = refused(ops.post(f"/api/v1/schedules/{sid}/resume", {}), 409, _rows())
    assert "was removed" in gone["detail"]
    assert [e.action for e in AuditEvent.objects.order_by("id")] == [
        "schedule_add",
        "schedule_pause",
        "schedule_resume",
        "schedule_remove",
    ]


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ({"cron": "61 * * * *", "interval": None}, 422, "is not a cron expression"),
        ({"cron": "0 3 * * *", "interval": None, "timezone": "Atlantis/Capital"}, 422, "time zone"),
        ({"interval": 0}, 422, "interval: 0 s"),
        ({"interval": 1.5}, 422, "interval"),
        ({"cron": "* * * * *"}, 422, "exactly one"),
        ({"agent": "ghost"}, 422, "no agent named 'ghost'"),
        ({"agent": "paced"}, 422, "concurrency key is inputs.customer"),
        ({"missed": "later"}, 422, "missed"),
        ({"priority": 10}, 422, "priority"),
        ({"name": "sch_mine"}, 422, "name"),
        ({"surprise": 1}, 422, "unknown field"),
    ],
)
def test_bad_input_is_refused_with_a_problem_and_nothing_is_written(
    caller: Any, change: dict[str, Any], status: int, says: str
) -> None:
    ops = caller("operator")
    answer = refused(ops.post("/api/v1/schedules", {**BODY, **change}), status, (0, 0))
    assert says in answer["detail"], answer


def test_roles_a_name_in_use_and_an_unknown_schedule(caller: Any) -> None:
    ops, viewer = caller("operator"), caller("viewer")
    assert ops.post("/api/v1/schedules", BODY).status_code == 201
    before = _rows()
    refused(viewer.post("/api/v1/schedules", {**BODY, "name": "other"}), 403, before)
    sid = Schedule.objects.get().schedule_id
    refused(viewer.post(f"/api/v1/schedules/{sid}/pause", {}), 403, before)
    assert "exists" in refused(ops.post("/api/v1/schedules", BODY), 409, before)["detail"]
    refused(ops.post("/api/v1/schedules/ghost/pause", {}), 404, before)
    refused(viewer.get("/api/v1/schedules/sch_0000"), 404, before)
    refused(viewer.get("/api/v1/schedules?everything=1"), 422, before)
    assert not Run.objects.exists()
    assert timezone.now() < Schedule.objects.get().next_at
