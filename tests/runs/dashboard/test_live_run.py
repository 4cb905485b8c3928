"""Live running runs (issue 10): the header of a running run says how many steps it has recorded
and which row it wrote last; one poll refreshes header and step table together, and the last
poll of a finished run removes the "a worker resumes it now" banner."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.models import Step
from ledger.processes import execute as execution
from tests.support.dashboard_runs import (
    expired_lease_run,
    signed_in,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


def viewer() -> Client:
    return signed_in("viewer")


def test_a_running_run_shows_its_step_count_and_last_write_and_polls_as_one(
    execute, crash_at, clock
) -> None:
    run = expired_lease_run(execute, crash_at)  # a worker died mid-run: still "running"
    client = viewer()
    recorded = Step.objects.filter(run_id=run.run_id)
    last = recorded.order_by("-updated_at", "-id").first()
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="run-live"' in page
    assert f"<b>{recorded.count()}</b> steps recorded" in page
    assert f'<span class="mono">{last.step_id}</span> {last.status}' in page
    table = page.split('id="step-table"', 1)[1].split(">", 1)[0]
    assert 'hx-trigger="run-changed from:body"' in table and "every" not in table
    polled = client.get(f"/runs/{run.run_id}/header/", headers={"HX-Request": "true"})
    assert polled["HX-Trigger"] == "run-changed"
    assert 'hx-swap-oob="true"' not in polled.content.decode()  # still active: banner stays
    clock.advance(3600)
    assert execution.run_execute(run_id=run.run_id, worker="w2", clock=clock, heartbeat=False)
    done = client.get(f"/runs/{run.run_id}/header/", headers={"HX-Request": "true"})
    html = done.content.decode()
    assert done["HX-Trigger"] == "run-changed"  # the table's last refresh
    assert '<div id="flash" hx-swap-oob="true"></div>' in html  # the banner goes
    assert 'id="run-live"' not in html and "data-poll" not in html


def test_a_running_batched_run_says_its_count_grows_in_batches(execute, crash_at) -> None:
    """An agent with batched durability: the live header says how far its recorded steps may
    lag (its own bounds); a stepwise agent's header says nothing of it."""
    from harness import faults
    from ledger import transitions

    crash_at("lookup_record")  # the worker dies at its first read: the run stays "running"
    run = transitions.run_start(agent="survey_batched", inputs={"records": 3})
    execute(run.run_id, crash_expected=True)
    faults.clear_hooks()
    client = viewer()
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="run-batched"' in page
    assert "up to 16 steps or 200 ms at a time, and always before an effect is sent" in page
    stepwise = expired_lease_run(execute, crash_at)
    assert 'id="run-batched"' not in client.get(f"/runs/{stepwise.run_id}/").content.decode()
