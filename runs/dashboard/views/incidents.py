"""The Incidents page: the runs that need attention, and those that failed lately, grouped by
cause — agent, step, reason and error signature (``ledger.signatures``) — largest group first,
with counts and first/last seen (one GROUP BY on the partial index ``run_incident``). A group's
page lists its runs and offers the bulk actions on exactly them (resume, retry, cancel, pause:
``runs/dashboard/views/bulk.py``, ``scope=incident``) and "pause this tool", with an expiry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger import selectors
from ledger.inputs import queryable
from ledger.models import RunStatus
from runs.dashboard.http import HtmxHttpRequest
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.operator_forms import PauseForm

#: How far back failed runs count (the page's choice; needs-attention runs count whatever age).
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
DEFAULT_WINDOW = "24h"
INCIDENT_WINDOW_MAX = max(WINDOWS.values())
RUNS_SHOWN = 50
_FIELDS = {"i_status": "status", "i_agent": "agent", "i_step": "step", "i_reason": "reason",
           "i_sig": "signature"}  # fmt: skip


def _window(request: HttpRequest) -> str:
    chosen = str(request.GET.get("since", ""))
    return chosen if chosen in WINDOWS else DEFAULT_WINDOW


def incident_group_of(request: HttpRequest) -> dict[str, str] | None:
    """The group a request names (``i_status`` … ``i_sig``), or None when it names none."""
    group = {name: str(request.GET.get(param, ""))[:255] for param, name in _FIELDS.items()}
    if group["status"] not in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED):
        return None
    if not all(queryable(v) for v in group.values()):
        return None
    return group


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def incidents(request: HtmxHttpRequest) -> HttpResponse:
    since = _window(request)
    groups = selectors.incident_groups(failed_since=timezone.now() - WINDOWS[since])
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
    since = _window(request)
    group = incident_group_of(request)
    if group is None:
        problem = {"problem": "That is not a group of the incidents page: choose one there."}
        return render(request, "runs/incident_group.html", problem, status=400)
    runs = selectors.incident_runs(**group, failed_since=timezone.now() - WINDOWS[since])
    count = runs.count()
    shown = list(runs[:RUNS_SHOWN])
    tool = selectors.tool_of_step(run_id=shown[0].run_id, step_id=group["step"]) if shown else ""
    context: dict[str, Any] = {
        "group": group,
        "since": since,
        "count": count,
        "runs": shown,
        "tool": tool,
        "bulk_query": urlencode({**{p: group[n] for p, n in _FIELDS.items()}, "scope": "incident"}),
        "pause_form": PauseForm(initial={"scope": "tool", "target": tool, "expires_in": 60}),
    }
    return render(request, "runs/incident_group.html", context)
