"""The Incidents page (issue 35, item 4): blocked and failed runs grouped by agent, step, reason
and error signature, a group's page with its runs, its bulk actions on exactly those runs and
"pause this tool" with an expiry; and the Alerts page's acknowledgement ("I'm on it")."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.utils import timezone

from ledger import registry, selectors
from ledger.models import Alert, Handover, Pause, Run
from ledger.processes import alerting
from tests.support.dashboard_runs import html_run, renewal_run, restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def _clean(dashboard_ready: None) -> Any:
    yield
    registry.unregister_agent("markup-agent")


def _client(role: str) -> Client:
    client = Client()
    client.force_login(user_in(role))
    return client


def test_three_runs_stopped_by_one_cause_are_one_group_with_its_actions(
    _clean: None, execute: Any, crash_at: Any
) -> None:
    restore_roles()
    runs = [
        renewal_run(execute, crash_at, customer=c)
        for c in ("cus_hopper", "cus_knuth", "cus_lovelace")
    ]
    hostile = html_run(execute, crash_at)
    groups = selectors.incident_groups(failed_since=timezone.now() - timedelta(days=1))
    assert [(g.agent, g.step, g.reason, g.count) for g in groups] == [
        ("renewal", "charge", "reconciliation", 3),
        ("markup-agent", hostile.blocked_step_id, "reconciliation", 1),
    ]
    renewal = groups[0]
    assert {r.signature for r in Run.objects.filter(agent="renewal")} == {renewal.signature}

    viewer = _client("viewer")
    page = viewer.get("/incidents/").content.decode()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count('class="incident-group"') == 2
    partial = viewer.get("/incidents/?since=7d", HTTP_HX_REQUEST="true").content.decode()
    assert partial.startswith('<div id="incident-groups">')

    query = urlencode({**renewal.query(), "since": "24h"})
    group = viewer.get(f"/incidents/group/?{query}").content.decode()
    assert all(r.run_id in group for r in runs) and "Pause these runs" not in group  # a viewer
    assert viewer.get("/incidents/group/?i_status=succeeded").status_code == 400

    operator = _client("operator")
    group = operator.get(f"/incidents/group/?{query}").content.decode()
    assert "Pause these runs" in group and 'id="pause-tool-form"' in group
    preview = operator.get(f"/bulk/?action=pause&scope=incident&{urlencode(renewal.query())}")
    assert preview.status_code == 200
    targets = [f"{r.run_id}:{r.version}" for r in runs]
    assert sorted(preview.context["targets"]) == sorted(r.run_id for r in runs)
    done = operator.post("/bulk/apply/", {"action": "pause", "reason": "gateway down",
                                          "target": targets})  # fmt: skip
    assert done.status_code == 200 and done.context["done"] == 3
    assert sorted(Pause.objects.values_list("target", flat=True)) == sorted(r.run_id for r in runs)

    tool = selectors.tool_of_step(run_id=runs[0].run_id, step_id="charge")
    made = operator.post("/pauses/new/", {"scope": "tool", "target": tool, "reason": "down",
                                          "expires_in": "60"})  # fmt: skip
    assert made.status_code == 302
    pause = Pause.objects.get(scope="tool")
    assert pause.expires_at is not None
    assert timedelta(minutes=59) < pause.expires_at - timezone.now() <= timedelta(minutes=60)
    assert "pause this tool" in operator.get(f"/runs/{runs[0].run_id}/").content.decode()


def test_an_operator_acknowledges_an_alert_on_the_page_and_is_on_its_runs(
    _clean: None, execute: Any, crash_at: Any, settings: Any
) -> None:
    restore_roles()
    settings.RUNLEDGER_ALERT_RECEIVERS = ""
    settings.RUNLEDGER_ALERT_RULES = json.dumps(
        [{"name": "stuck", "kind": "blocked_longer", "minutes": 1, "per": "agent"}]
    )
    run = renewal_run(execute, crash_at)
    alerting.alerts_evaluate(clock=lambda: timezone.now() + timedelta(days=1))
    alert = Alert.objects.get()
    viewer = _client("viewer")
    page = viewer.get("/alerts/").content.decode()
    assert 'id="rule-stuck"' in page and "Acknowledge" not in page
    assert viewer.post(f"/alerts/{alert.pk}/ack/").status_code == 403
    operator = Client()
    operator.force_login(user_in("operator", "olivia"))
    assert "Acknowledge: I'm on it" in operator.get("/alerts/").content.decode()
    assert operator.post(f"/alerts/{alert.pk}/ack/").status_code == 302
    assert Handover.objects.get(pk=run.run_id).taken_by == "olivia"
    assert "olivia is on it" in operator.get("/alerts/").content.decode()
    assert operator.post("/alerts/999999/ack/").status_code == 400
