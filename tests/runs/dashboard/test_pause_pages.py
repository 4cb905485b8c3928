"""The Pauses page, the paused runs on the list and the run page, and a run page's
executions."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.models import AuditEvent, Pause, Run
from tests.support.dashboard_runs import restore_roles, start, user_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_pauses_a_tool_sees_the_held_run_and_lifts_it(execute, clock) -> None:
    restore_roles()
    client = Client()
    client.force_login(user_in("operator"))
    refused = client.post("/pauses/new/", {"scope": "tool", "target": "nope", "reason": "x"})
    assert refused.status_code == 400 and "No tool named" in refused.content.decode()
    assert Pause.objects.count() == AuditEvent.objects.count() == 0

    done = client.post(
        "/pauses/new/", {"scope": "tool", "target": "refund_charge", "reason": "down <b>"}
    )
    assert done.status_code == 302
    pause = Pause.objects.get()
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    assert execute(run.run_id).status == "paused"

    page = client.get("/pauses/").content.decode()
    assert "Lift: queue 1 run" in page and "down &lt;b&gt;" in page
    listing = client.get("/").content.decode()
    assert 'id="pauses-banner"' in listing and "refund_charge" in listing
    assert run.run_id in client.get("/?status=paused").content.decode()
    run_page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="run-paused"' in run_page and 'id="run-executions"' in run_page

    stale = client.post(f"/pauses/{pause.pk}/lift/", {"expected": 2, "reason": "up"})
    assert stale.status_code == 409 and Run.objects.get(pk=run.run_id).status == "paused"
    lifted = client.post(f"/pauses/{pause.pk}/lift/", {"expected": 1, "reason": "up"})
    assert lifted.status_code == 302 and Run.objects.get(pk=run.run_id).status == "queued"


def test_a_viewer_sees_pauses_but_cannot_pause() -> None:
    restore_roles()
    client = Client()
    client.force_login(user_in("viewer"))
    assert client.get("/pauses/").status_code == 200
    denied = client.post(
        "/pauses/new/", {"scope": "tool", "target": "refund_charge", "reason": "x"}
    )
    assert denied.status_code == 403 and Pause.objects.count() == 0
