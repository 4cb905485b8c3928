"""The Pacing page: per concurrency key, the runs running and the runs held back; per rate
limit, its next free slot, the calls waiting for one and the runs released to wait. The tables
refresh themselves (htmx); reads only (``ledger.selectors.pacing``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger.selectors import pacing
from runs.dashboard.http import HtmxHttpRequest, require_every_team
from runs.dashboard.models import VIEW_DASHBOARD

KEYS_SHOWN = 50


def _context() -> dict[str, Any]:
    keys, other = pacing.concurrency_keys(limit=KEYS_SHOWN)
    return {
        "keys": keys,
        "other": other,
        "limits": pacing.rate_limits(now=timezone.now()),
        "every": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        "keys_shown": KEYS_SHOWN,
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def pacing_page(request: HtmxHttpRequest) -> HttpResponse:
    """The page; its own refresh (htmx) gets the tables only. Concurrency keys and rate limits
    are shared by every team's runs: the page is for the roles that hold in every team."""
    require_every_team(request, VIEW_DASHBOARD)
    if request.htmx:
        return render(request, "runs/partials/pacing_tables.html", _context())
    return render(request, "runs/pacing.html", _context())
