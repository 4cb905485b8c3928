"""The API's handover: take, take over, release and notes, as the run page's "On it" box; each
change audited as ``api:<name>``; a repeat changes nothing; a lost race is a 409 problem."""

from __future__ import annotations

import pytest

from ledger.models import AuditEvent, Handover
from tests.support.dashboard_runs import start

pytestmark = pytest.mark.django_db(transaction=True)


def test_take_note_and_release_through_the_api(caller, clock) -> None:
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    ops, other, viewer = caller("operator", name="ops"), caller("operator"), caller("viewer")
    base = f"/api/v1/runs/{run.run_id}"
    taken = ops.post(f"{base}/take", {})
    assert taken.status_code == 200 and taken.json()["taken_by"] == "api:ops"
    assert ops.post(f"{base}/take", {}).status_code == 200  # a repeat: nothing changes
    assert AuditEvent.objects.filter(action="run_take").count() == 1

    lost = other.post(f"{base}/take", {"seen_holder": ""})
    assert lost.status_code == 409
    assert lost["Content-Type"].startswith("application/problem+json")
    assert "api:ops is on this run already" in lost.json()["detail"]
    assert lost.json()["current"]["taken_by"] == "api:ops"
    assert Handover.objects.get(pk=run.run_id).taken_by == "api:ops"

    noted = ops.post(f"{base}/notes", {"text": "<b>refund</b> asked", "key": "n1"})
    assert noted.status_code == 200 and noted.json()["notes"][0]["text"] == "<b>refund</b> asked"
    assert (
        ops.post(f"{base}/notes", {"text": "<b>refund</b> asked", "key": "n1"}).status_code == 200
    )
    assert AuditEvent.objects.filter(action="run_note").count() == 1
    assert ops.post(f"{base}/notes", {"text": "  ", "key": "n2"}).status_code == 422

    assert viewer.get(f"{base}/handover").json()["taken_by"] == "api:ops"
    assert viewer.post(f"{base}/take", {}).status_code == 403
    released = ops.post(f"{base}/release")
    assert released.status_code == 200 and released.json()["taken_by"] == ""
    assert ops.post(f"{base}/release").status_code == 409  # nobody is on it now
    assert ops.get("/api/v1/runs/run_nope/handover").status_code == 404
