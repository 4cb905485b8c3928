"""The Incidents page: the runs that need attention, and those that failed lately, grouped by
cause — agent, step, reason and error signature (``ledger.signatures``) — largest group first,
with counts and first/last seen (one GROUP BY on the partial index ``run_incident``). A group's
page lists its runs and offers the bulk actions on exactly them (resume, retry, cancel, pause:
``runs/dashboard/views/bulk.py``, ``scope=incident``) and "pause this tool", with an expiry."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger import selectors
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.incidents import FIELDS, WINDOWS, incident_group_of, window_of
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.operator_forms import PauseForm

RUNS_SHOWN = 50


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def incidents(request: HtmxHttpRequest) -> HttpResponse:
    since = window_of(request)
    groups = selectors.incident_groups(
        failed_since=timezone.now() - WINDOWS[since], teams=seen_teams(request)
    )
    rows = [(g, urlencode({**g.query(), "since": since})) for g in groups]
    context: dict[str, Any] = {
        "rows": rows,
        "since": since,
        "windows": list(WINDOWS),
        "total": sum(g.count for g in groups),
        "shown_max": selectors.GROUPS_SHOWN,
    }
    template = "runs/partials/incident_groups.html" if request.htmx else "runs/incidents.html"
    return render(request, template, context)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def incident_group(request: HtmxHttpRequest) -> HttpResponse:
    since = window_of(request)
    group = incident_group_of(request)
    if group is None:
        problem = {"problem": "That is not a group of the incidents page: choose one there."}
        return render(request, "runs/incident_group.html", problem, status=400)
    runs = selectors.incident_runs(
        **group, failed_since=timezone.now() - WINDOWS[since], teams=seen_teams(request)
    )
    count = runs.count()
    shown = list(runs[:RUNS_SHOWN])
    tool = selectors.tool_of_step(run_id=shown[0].run_id, step_id=group["step"]) if shown else ""
    context: dict[str, Any] = {
        "group": group,
        "since": since,
        "count": count,
        "runs": shown,
        "tool": tool,
        "bulk_query": urlencode({**{p: group[n] for p, n in FIELDS.items()}, "scope": "incident"}),
        "pause_form": PauseForm(initial={"scope": "tool", "target": tool, "expires_in": 60}),
    }
    return render(request, "runs/incident_group.html", context)
