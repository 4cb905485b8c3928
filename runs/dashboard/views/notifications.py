"""The notifications page: every message the outbox holds (who was told of what, by which
channel, when, after how many attempts, and why the last one failed), newest first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from ledger.errors import InvalidInput
from ledger.inputs import parse_whole_number
from ledger.transitions import notify
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.models import VIEW_DASHBOARD

PAGE = 50


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def notifications(request: HtmxHttpRequest) -> HttpResponse:
    status = request.GET.get("status", "")
    status = status if status in selectors.NOTIFICATION_STATUSES else ""
    before = str(request.GET.get("before", "")).strip()
    try:
        before_id = parse_whole_number(before, what="before", hi=2**63 - 1) if before else None
    except InvalidInput:
        before_id = None  # a damaged page link: the first page
    rows = selectors.notifications_page(
        status=status, before_id=before_id, limit=PAGE, teams=seen_teams(request)
    )
    context = {
        "rows": rows,
        "status": status,
        "statuses": selectors.NOTIFICATION_STATUSES,
        "channels": notify.channels(),
        "next_before": rows[-1].pk if len(rows) == PAGE else None,
    }
    return render(request, "runs/notifications.html", context)
