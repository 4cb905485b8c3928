"""The Schedules page: every live schedule with its next tick and last run, hostile text
escaped; an operator pauses and resumes one (htmx answers the row, a plain post redirects, a
second click is refused and changes nothing); a viewer reads and cannot act; the runs list
filters by schedule."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client

from ledger import transitions
from ledger.models import AuditEvent, Run, Schedule
from ledger.processes.schedules import schedules_tick
from tests.support import paced_agents  # noqa: F401 - registers the agents
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = '<script>alert("x")</script>'


def _schedule(name: str = "nightly") -> Schedule:
    return transitions.schedule_add(
        name=name,
        agent="paced-free",
        inputs={"seconds": 0},
        cron="0 3 * * *",
        timezone_name="Europe/Paris",
        description=HOSTILE,
        by="cli:ops",
    )


def test_an_operator_reads_pauses_and_resumes_a_schedule() -> None:
    restore_roles()
    made = _schedule()
    every = transitions.schedule_add(
        name="every-minute", agent="paced-free", inputs={"seconds": 0}, interval=60, by="cli:ops"
    )
    (run_id,) = schedules_tick(clock=lambda: every.next_at + timedelta(seconds=1))
    client = Client()
    client.force_login(user_in("operator"))
    page = client.get("/schedules/").content.decode()
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert "cron 0 3 * * * (Europe/Paris)" in page and "every 1 min" in page
    assert f'href="/runs/{run_id}/"' in page and f"?schedule={every.schedule_id}" in page
    assert 'aria-current="page">Schedules' in page

    htmx = client.post(
        f"/schedules/{made.schedule_id}/pause/", {"reason": "moved"}, HTTP_HX_REQUEST="true"
    )
    row = htmx.content.decode()
    assert htmx.status_code == 200 and row.lstrip().startswith(f'<tr id="{made.schedule_id}"')
    assert "Paused nightly" in row and "Resume" in row
    again = client.post(f"/schedules/{made.schedule_id}/pause/", HTTP_HX_REQUEST="true")
    assert "Nothing was changed" in again.content.decode() and "paused already" in (
        again.content.decode()
    )
    plain = client.post(f"/schedules/{made.schedule_id}/pause/")
    assert plain.status_code == 409 and "paused already" in plain.content.decode()
    resumed = client.post(f"/schedules/{made.schedule_id}/resume/")
    assert resumed.status_code == 302 and resumed["Location"].endswith(f"#{made.schedule_id}")
    assert Schedule.objects.get(pk=made.schedule_id).paused_at is None
    acted = AuditEvent.objects.filter(action__in=["schedule_pause", "schedule_resume"])
    assert list(acted.order_by("id").values_list("action", "actor", "reason")) == [
        ("schedule_pause", "operator-user", "moved"),
        ("schedule_resume", "operator-user", "schedule resumed"),
    ]

    run_page = client.get(f"/runs/{run_id}/").content.decode()
    assert 'id="run-schedule"' in run_page and every.schedule_id in run_page
    listing = client.get(f"/?schedule={every.schedule_id}").content.decode()
    assert run_id in listing and 'id="schedule-filter"' in listing
    assert run_id not in client.get(f"/?schedule={made.schedule_id}").content.decode()


def test_a_viewer_reads_the_page_and_cannot_pause() -> None:
    restore_roles()
    made = _schedule()
    client = Client()
    client.force_login(user_in("viewer"))
    page = client.get("/schedules/").content.decode()
    assert "nightly" in page and "Pause" not in page.split('id="schedules"')[1]
    denied = client.post(f"/schedules/{made.schedule_id}/pause/")
    assert denied.status_code == 403
    assert Schedule.objects.get().paused_at is None and AuditEvent.objects.count() == 1
    assert client.post("/schedules/sch_nope/pause/").status_code == 403
    assert not Run.objects.exists()
