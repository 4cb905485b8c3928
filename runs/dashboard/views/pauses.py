"""The Pauses page: the active pauses, each with the runs it holds and a lift (which shows the
count first and is refused when the count changed since), the form to pause a tool, an agent or
a run, and the pauses lifted lately. Each POST calls one function of ``ledger.transitions``."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from ledger.models import Pause, PauseScope
from runs.dashboard.http import (
    HtmxHttpRequest,
    render_refused,
    require_every_team,
    run_for,
    seen_teams,
)
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD
from runs.dashboard.operator_forms import LiftForm, PauseForm

LIFTED_SHOWN = 20


def _context(request: HtmxHttpRequest, form: PauseForm | None = None) -> dict[str, Any]:
    teams = seen_teams(request)
    return {
        "active": list(selectors.pauses_list(active=True, teams=teams)),
        "lifted": list(
            selectors.pauses_list(active=False, teams=teams).filter(lifted_at__isnull=False)
        )[:LIFTED_SHOWN],
        "form": form or PauseForm(),
        # A team's operator pauses their team's runs; a tool or an agent (every team's runs)
        # is paused by an operator in every team.
        "pause_everywhere": seen_teams(request, OPERATE_RUNS) is None,
    }


def _may_pause(request: HtmxHttpRequest, scope: str, target: str) -> None:
    """A pause of one run: the operator role in its team (another team's run is a missing
    one, 404). Of a tool or an agent, which holds every team's runs: in every team (403)."""
    if scope == PauseScope.RUN:
        run_for(request, target, perm=OPERATE_RUNS)
    else:
        require_every_team(request, OPERATE_RUNS)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def pauses_page(request: HtmxHttpRequest) -> HttpResponse:
    initial = {k: request.GET[k][:200] for k in ("scope", "target") if k in request.GET}
    return render(request, "runs/pauses.html", _context(request, PauseForm(initial=initial)))


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def pause_create(request: HtmxHttpRequest) -> HttpResponse:
    form = PauseForm(request.POST)
    if not form.is_valid():
        return render(request, "runs/pauses.html", _context(request, form), status=400)
    data = form.cleaned_data
    _may_pause(request, data["scope"], data["target"])
    try:
        pause = transitions.pause_create(
            scope=data["scope"],
            target=data["target"],
            by=request.user,
            reason=data["reason"],
            expires_at=form.expires_at(timezone.now()),
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/pauses.html", _context(request, form), exc)
    until = (
        f" until {timezone.localtime(pause.expires_at):%Y-%m-%d %H:%M %Z}"
        if pause.expires_at
        else ""
    )
    messages.success(request, f"Paused {pause.scope} {pause.target}{until}.")
    return redirect("runs:pauses")


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def pause_lift(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    found = Pause.objects.filter(pk=pk).first()
    if found is None:
        raise Http404(f"no pause #{pk}")
    _may_pause(request, found.scope, found.target)
    form = LiftForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A lift needs a reason (and the count it was shown).")
        return redirect("runs:pauses")
    try:
        pause = transitions.pause_lift(
            pause_id=pk,
            by=request.user,
            reason=form.cleaned_data["reason"],
            expected=form.cleaned_data["expected"],
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/pauses.html", _context(request), exc)
    messages.success(
        request, f"Lifted the pause of {pause.scope} {pause.target}: {pause.requeued} runs queued."
    )
    return redirect("runs:pauses")
