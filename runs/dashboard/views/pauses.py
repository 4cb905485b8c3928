"""The Pauses page: the active pauses, each with the runs it holds and a lift (which shows the
count first and is refused when the count changed since), the form to pause a tool, an agent or
a run, and the pauses lifted lately. Each POST calls one function of ``ledger.transitions``."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from runs.dashboard.http import HtmxHttpRequest, render_refused
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD
from runs.dashboard.operator_forms import LiftForm, PauseForm

LIFTED_SHOWN = 20


def _context(form: PauseForm | None = None) -> dict[str, Any]:
    return {
        "active": list(selectors.pauses_list(active=True)),
        "lifted": list(selectors.pauses_list(active=False).filter(lifted_at__isnull=False))[
            :LIFTED_SHOWN
        ],
        "form": form or PauseForm(),
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def pauses_page(request: HtmxHttpRequest) -> HttpResponse:
    initial = {k: request.GET[k][:200] for k in ("scope", "target") if k in request.GET}
    return render(request, "runs/pauses.html", _context(PauseForm(initial=initial)))


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def pause_create(request: HtmxHttpRequest) -> HttpResponse:
    form = PauseForm(request.POST)
    if not form.is_valid():
        return render(request, "runs/pauses.html", _context(form), status=400)
    data = form.cleaned_data
    try:
        pause = transitions.pause_create(
            scope=data["scope"],
            target=data["target"],
            by=request.user,
            reason=data["reason"],
            expires_at=form.expires_at(timezone.now()),
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/pauses.html", _context(form), exc)
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
        return render_refused(request, "runs/pauses.html", _context(), exc)
    messages.success(
        request, f"Lifted the pause of {pause.scope} {pause.target}: {pause.requeued} runs queued."
    )
    return redirect("runs:pauses")
