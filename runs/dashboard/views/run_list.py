"""The runs list: counts per status, the filtered table a keyset page at a time, and the htmx
fragments that refresh themselves (a refresh whose content has not changed answers 204).

Behind the login and ``runs.view_dashboard``; reads only (``ledger.selectors``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from ledger import registry, selectors
from ledger.selectors.handover import handovers_for
from ledger.selectors.usage import usage_of_runs
from runs.dashboard.forms import RunFilterForm, encode_query, filter_query
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.teams import teams_shown


def _polled(request: HttpRequest, template: str, context: dict[str, Any], *, dom_id: str) -> str:
    """Render a fragment wrapped in an element that re-fetches itself every few seconds.

    The wrapper carries a digest of what it shows; a refresh whose content has not changed
    answers 204 and htmx leaves the page alone (see ``_unchanged``).
    """
    inner = render_to_string(template, context, request=request)
    digest = hashlib.sha256(inner.encode()).hexdigest()[:20]
    query = encode_query({**context.get("query", {}), "digest": digest})
    return render_to_string(
        "runs/partials/polled.html",
        {
            "dom_id": dom_id,
            "url": f"{request.path}?{query}",
            "every": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
            "inner": mark_safe(inner),  # our own template's output, already escaped
            "digest": digest,
        },
        request=request,
    )


def _unchanged(request: HttpRequest, html: str) -> bool:
    sent = request.GET.get("digest", "")
    return bool(sent) and f'data-digest="{sent}"' in html


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    """The list; an htmx request for one fragment (a refresh, a filter) gets only that one."""
    now = timezone.now()
    form = RunFilterForm(request.GET)
    form.is_valid()  # invalid values are dropped from the filter and reported
    flt = form.run_filter(taker=request.user.get_username(), teams=seen_teams(request))
    query = filter_query(flt, age_text=str(request.GET.get("age", "")).strip())
    target = _fragment_target(request, ("status-counts", "run-table"))
    if target is not None:
        if target == "status-counts":
            html = _counts_fragment(request, flt, query, now)
        else:
            html = _table_fragment(request, form, flt, query, now)
        return HttpResponse(status=204) if _unchanged(request, html) else HttpResponse(html)
    context = {
        "form": form,
        "flt": flt,
        "counts_html": mark_safe(_counts_fragment(request, flt, query, now)),
        "table_html": mark_safe(_table_fragment(request, form, flt, query, now)),
        "agents": sorted(_registered_agents()),
        "pauses": list(selectors.pauses_list(active=True, teams=flt.teams)[:10]),
        "team_choices": teams_shown(request.user),
    }
    return render(request, "runs/run_list.html", context)


def _counts_fragment(
    request: HttpRequest, flt: selectors.RunFilter, query: dict[str, str], now: datetime
) -> str:
    teams = flt.teams
    if flt.team:  # ?team= narrows the counts too (within what the reader may see)
        teams = frozenset({flt.team}) if teams is None else teams & {flt.team}
    counts = selectors.run_status_counts(now=now, teams=teams)
    context = {"counts": counts, "flt": flt, "query": query}
    return _polled(request, "runs/partials/status_counts.html", context, dom_id="status-counts")


def _table_fragment(
    request: HttpRequest,
    form: RunFilterForm,
    flt: selectors.RunFilter,
    query: dict[str, str],
    now: datetime,
) -> str:
    cursor = form.cursor()
    limit = settings.RUNLEDGER_RUNS_PER_PAGE
    page = selectors.runs_page(flt=flt, now=now, after=cursor, limit=limit)
    next_query = ""
    if page.next_cursor is not None:
        next_query = encode_query({**query, "after": page.next_cursor.encode()})
    context = {
        "page": page,
        "now": now,
        # Ages count from the start of the minute, so that a refresh finds the table
        # unchanged (204) until a minute turns or a run really moves.
        "minute": now.replace(second=0, microsecond=0),
        "flt": flt,
        "query": {**query, "after": cursor.encode()} if cursor else query,
        "base_query": encode_query(query),
        "next_query": next_query,
        "problems": form.problems(),
        "first_page": cursor is None,
        # Who is on each run of the page (one query by primary key).
        "on_it": handovers_for(run_ids=[run.run_id for run in page.runs]),
        # Tokens and cost of the page's runs (one query on the model steps' index).
        "usage": usage_of_runs(run_ids=[run.run_id for run in page.runs]),
        # A Team column when the reader sees more than one team.
        "show_team": len(teams_shown(request.user)) > 1,
    }
    return _polled(request, "runs/partials/run_table.html", context, dom_id="run-table")


def _fragment_target(request: HtmxHttpRequest, known: tuple[str, ...]) -> str | None:
    """The fragment an htmx request asks for, or None for the whole page."""
    if not request.htmx or request.htmx.history_restore_request:
        return None
    return request.htmx.target if request.htmx.target in known else None


def _registered_agents() -> list[str]:
    return list(registry.agents())
