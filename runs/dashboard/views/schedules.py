"""The Schedules page: every live schedule with when it ticks, its next tick (in the schedule's
zone and the reader's), its last run and what its last pass could not start; operators pause
and resume one (``ledger.transitions.schedules``, each audited). Adding and removing are the
command's and the API's (``runledger schedules``, ``/api/v1/schedules``).

A pause or resume from htmx answers the schedule's row again; a plain form post is redirected
to the page; a refusal (paused already, removed meanwhile) shows the page with what was refused.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from ledger import schedules, selectors, transitions
from ledger.models import Schedule
from runs.dashboard.http import HtmxHttpRequest, render_refused, require_every_team
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD

#: Removed schedules shown under the live ones.
REMOVED_SHOWN = 20


def _row(s: Schedule) -> dict[str, Any]:
    spec = schedules.Spec(cron=s.cron, interval=s.interval_seconds, timezone=s.timezone)
    return {"s": s, "when": spec.describe(), "zone": spec.zone}


def _context() -> dict[str, Any]:
    live = list(selectors.schedules_list())
    removed = [s for s in selectors.schedules_list(removed=True) if s.removed_at is not None]
    return {
        "rows": [_row(s) for s in live],
        "removed": removed[:REMOVED_SHOWN],
        "policies": schedules.POLICIES,
        "catch_up_max": schedules.CATCH_UP_MAX,
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def schedules_page(request: HtmxHttpRequest) -> HttpResponse:
    require_every_team(request, VIEW_DASHBOARD)  # schedules belong to no team
    return render(request, "runs/schedules.html", _context())


def _schedule(schedule_id: str) -> Schedule:
    found = selectors.schedule_named(schedule_id)
    if found is None or found.removed_at is not None:
        raise Http404("no such schedule")
    return found


def _act(request: HtmxHttpRequest, schedule_id: str, change: Any, said: str) -> HttpResponse:
    require_every_team(request, OPERATE_RUNS)
    found = _schedule(schedule_id)
    reason = str(request.POST.get("reason", ""))[:4000]
    try:
        done = change(schedule_id=found.schedule_id, by=request.user, reason=reason)
    except transitions.OperationError as exc:
        if request.htmx:  # the row as it is now, saying what was refused (htmx swaps a 200)
            found.refresh_from_db()
            row = {"row": _row(found), "refused": str(exc)}
            return render(request, "runs/partials/schedule_row.html", row)
        return render_refused(request, "runs/schedules.html", _context(), exc)
    if request.htmx:
        context = {"row": _row(done), "said": said.format(name=done.name)}
        return render(request, "runs/partials/schedule_row.html", context)
    messages.success(request, said.format(name=done.name))
    return redirect(reverse("runs:schedules") + f"#{done.schedule_id}")


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def schedule_pause(request: HtmxHttpRequest, schedule_id: str) -> HttpResponse:
    return _act(
        request, schedule_id, transitions.schedule_pause, "Paused {name}: its ticks start nothing."
    )


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def schedule_resume(request: HtmxHttpRequest, schedule_id: str) -> HttpResponse:
    return _act(
        request, schedule_id, transitions.schedule_resume, "Resumed {name}: it ticks from now."
    )
