"""The Alerts page: the alert rules the settings declare (``RUNLEDGER_ALERT_RULES``), each with
its open incidents (triggered or acknowledged, what they cover, since when) and the incidents
resolved lately; an operator acknowledges an incident here, which stops its paging and puts
them on its runs ("I'm on it"). Each POST calls one function of the ledger."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from ledger.processes import alerting
from runs.dashboard.http import HtmxHttpRequest, render_refused, require_every_team
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD

RESOLVED_SHOWN = 20


def _context() -> dict[str, Any]:
    config = alerting.configured()
    open_alerts = list(selectors.alerts_open())
    rules = [
        {"rule": rule, "alerts": [a for a in open_alerts if a.rule == rule.name]}
        for rule in config.rules
    ]
    return {
        "rules": rules,
        "receivers": config.receivers,
        "orphans": [a for a in open_alerts if config.rule(a.rule) is None],
        "resolved": selectors.alerts_recent(limit=RESOLVED_SHOWN),
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def alerts_page(request: HtmxHttpRequest) -> HttpResponse:
    # The alert rules watch the whole installation (their incidents name any team's runs).
    require_every_team(request, VIEW_DASHBOARD)
    return render(request, "runs/alerts.html", _context())


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def alert_ack(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    require_every_team(request, OPERATE_RUNS)
    try:
        acked = alerting.alert_acknowledge(alert_id=pk, by=request.user)
    except transitions.OperationError as exc:
        return render_refused(request, "runs/alerts.html", _context(), exc)
    if not acked.changed:
        messages.info(request, f"{acked.alert.acked_by} acknowledged this incident already.")
    else:
        held = f"; {len(acked.held)} already had someone on them" if acked.held else ""
        messages.success(
            request,
            f"Acknowledged: you are on {len(acked.taken)} run{'s' if len(acked.taken) != 1 else ''}"
            f"{held}.",
        )
    return redirect("runs:alerts")
