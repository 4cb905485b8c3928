"""The deploy check page: what the agent code this web process loaded would do to the runs in
flight (``ledger.processes.deploy_check``). Reads only; the dry replays run when the page is
opened."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from ledger.processes.deploy_check import deploy_check
from runs.dashboard.http import HtmxHttpRequest, filter_text, require_every_team
from runs.dashboard.models import VIEW_DASHBOARD

PAGE_LIMIT = 200
SECONDS_PER_RUN = 2.0


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def deploy_page(request: HtmxHttpRequest) -> HttpResponse:
    require_every_team(request, VIEW_DASHBOARD)  # a deploy replays every team's runs
    agent = filter_text(request, "agent")
    verdicts = list(deploy_check(agent=agent, limit=PAGE_LIMIT, seconds=SECONDS_PER_RUN))
    titles = selectors.run_titles([v.run_id for v in verdicts])
    for verdict in verdicts:
        verdict.title = titles.get(verdict.run_id, "")  # type: ignore[attr-defined]
    context = {
        "verdicts": verdicts,
        "blocked": sum(v.blocks for v in verdicts),
        "agent": agent or "",
        "limit": PAGE_LIMIT,
    }
    return render(request, "runs/deploy.html", context)
