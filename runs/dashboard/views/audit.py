"""The audit page: every human change, newest first, filtered by run, actor, action and date,
a keyset page at a time (the next page starts strictly before the last row shown)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger import selectors
from runs.dashboard.forms import encode_query
from runs.dashboard.http import HtmxHttpRequest, seen_teams
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.operator_forms import AuditFilterForm, encode_audit_cursor

AUDIT_PAGE = 50


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def audit(request: HtmxHttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET)
    form.is_valid()  # a bad value is dropped with a message; the rest still filters
    data = form.cleaned_data
    since, until = form.bounds()
    events = selectors.audit_events(
        run_text=data.get("run") or None,
        actor=data.get("actor") or None,
        action=data.get("action") or None,
        since=since,
        until=until,
        teams=seen_teams(request),
    )
    rows, cursor = selectors.audit_page(events=events, before=data.get("before"), limit=AUDIT_PAGE)
    titles = selectors.run_titles([e.run_id for e in rows])
    for event in rows:
        event.run_title = titles.get(event.run_id, "")  # type: ignore[attr-defined]
    query = {
        k: str(request.GET.get(k, "")).strip() for k in ("run", "actor", "action", "since", "until")
    }
    query = {k: v for k, v in query.items() if v and k in data and data[k]}
    context = {
        "form": form,
        "events": rows,
        "problems": form.problems(),
        "base_query": encode_query(query),
        "next_query": encode_query({**query, "before": encode_audit_cursor(*cursor)})
        if cursor
        else "",
        "first_page": data.get("before") is None,
    }
    return render(request, "runs/audit.html", context)
