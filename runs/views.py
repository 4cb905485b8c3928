"""The dashboard's read side: the runs list, the run page and their htmx fragments.

(The acting side — settlements, stale steps, run actions, bulk, audit — is in
``settle_views``, ``action_views``, ``bulk_views`` and ``audit_views``.)

Every view is behind the login and declares its permission with a decorator, checked before
any lookup (so a refused user cannot tell a missing run from a present one); ``_run_for``
checks it again where the run is loaded. Views only read: they call selectors and the dry
replay in ``ledger``, which write nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from ledger import registry, selectors
from ledger.models import ACTIVE_STATUSES, FINAL_STATUSES, Run, Step
from ledger.preview import Preview, preview_resume
from runs import presenting
from runs.forms import RunFilterForm, encode_query, filter_query
from runs.models import EXPORT_LEDGER, VIEW_DASHBOARD

#: Audit events shown on a run page (the audit page has them all).
RUN_AUDIT_SHOWN = 20


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def _run_for(request: HttpRequest, run_id: str, *, perm: str = VIEW_DASHBOARD) -> Run:
    """The run, after checking the user may see it this way: 403 without ``perm``, 404 if none."""
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"this needs the permission {perm}")
    try:
        return selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404(f"no run {run_id!r}") from None


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


# --- the runs list -------------------------------------------------------------------------


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    """The list; an htmx request for one fragment (a refresh, a filter) gets only that one."""
    now = timezone.now()
    form = RunFilterForm(request.GET)
    form.is_valid()  # invalid values are dropped from the filter and reported
    flt = form.run_filter()
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
    }
    return render(request, "runs/run_list.html", context)


def _counts_fragment(
    request: HttpRequest, flt: selectors.RunFilter, query: dict[str, str], now: datetime
) -> str:
    counts = selectors.run_status_counts(now=now)
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
    }
    return _polled(request, "runs/partials/run_table.html", context, dom_id="run-table")


def _fragment_target(request: HtmxHttpRequest, known: tuple[str, ...]) -> str | None:
    """The fragment an htmx request asks for, or None for the whole page."""
    if not request.htmx or request.htmx.history_restore_request:
        return None
    return request.htmx.target if request.htmx.target in known else None


def _registered_agents() -> list[str]:
    return list(registry.agents())


# --- the run page --------------------------------------------------------------------------


def _page_number(request: HttpRequest, chain: selectors.Chain, per_page: int) -> int:
    """The page asked for (clamped), or the page holding the step named by ``?step=``."""
    pages = max(math.ceil(len(chain.pks) / per_page), 1)
    focus = request.GET.get("step", "")
    if focus in chain.index_of:
        return chain.index_of[focus] // per_page + 1
    try:
        number = int(request.GET.get("page", "1"))
    except ValueError:
        number = 1
    return min(max(number, 1), pages)


def compute_preview(run: Run) -> Preview:
    return preview_resume(run_id=run.run_id, seconds=settings.RUNLEDGER_PREVIEW_SECONDS)


def _step_table_context(request: HttpRequest, run: Run, *, compare: bool) -> dict[str, Any]:
    per_page = settings.RUNLEDGER_STEPS_PER_PAGE
    chain = selectors.step_chain(run_id=run.run_id)
    pages = max(math.ceil(len(chain.pks) / per_page), 1)
    number = _page_number(request, chain, per_page)
    start = (number - 1) * per_page
    pks = chain.pks[start : start + per_page]
    steps = selectors.steps_for_page(run_id=run.run_id, pks=pks)
    preview = compute_preview(run) if compare else None
    views = presenting.step_views(
        steps,
        first_position=start,
        on_chain=chain.on_chain,
        preview=preview,
        limit=selectors.RESULT_HEAD_CHARS,
    )
    blocked_page = None
    if run.blocked_step_id in chain.index_of:
        blocked_page = chain.index_of[run.blocked_step_id] // per_page + 1
    return {
        "run": run,
        "steps": views,
        "page": number,
        "pages": pages,
        "page_range": _page_links(number, pages),
        "total_steps": len(chain.pks),
        "on_chain": chain.on_chain,
        "off_chain": len(chain.pks) - chain.on_chain,
        "compare": compare,
        "preview": preview,
        "preview_seconds": settings.RUNLEDGER_PREVIEW_SECONDS,
        "blocked_page": blocked_page,
        "focus": request.GET.get("step", ""),
        # While a worker has the run, the table follows it (the header does too).
        "active": run.status in ACTIVE_STATUSES,
        "refresh": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
    }


def _page_links(number: int, pages: int) -> list[int | None]:
    """Page numbers to link: the ends and a window around the current one (None is a gap)."""
    wanted = sorted({1, pages, *range(max(number - 2, 1), min(number + 2, pages) + 1)})
    out: list[int | None] = []
    previous = 0
    for n in wanted:
        if previous and n - previous > 1:
            out.append(None)
        out.append(n)
        previous = n
    return out


def _header_context(run: Run) -> dict[str, Any]:
    now = timezone.now()
    blocked = None
    if run.blocked_step_id:
        blocked = selectors.steps_by_id(run_id=run.run_id, step_ids=[run.blocked_step_id]).get(
            run.blocked_step_id
        )
    return {
        "run": run,
        "final": run.status in FINAL_STATUSES,
        "blocked_step": blocked,
        "waiting_proposal": selectors.settlements_waiting().filter(run_id=run.run_id).first(),
        "now": now,
        "code": presenting.code_check(run),
        "children": selectors.run_children(run_id=run.run_id),
        "lease_expired": run.lease_expires_at is not None and run.lease_expires_at < now,
        "active": run.status in ACTIVE_STATUSES,
        "refresh": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        "inputs_text": presenting.pretty_capped(run.inputs),
        "result_text": presenting.pretty_capped(run.result),
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = _run_for(request, run_id)
    compare = request.GET.get("compare") == "1"
    context = {
        **_header_context(run),
        **_step_table_context(request, run, compare=compare),
        "can_export": request.user.has_perm(EXPORT_LEDGER),
        "audit_events": list(selectors.audit_events(run_id=run.run_id)[:RUN_AUDIT_SHOWN]),
        "audit_shown": RUN_AUDIT_SHOWN,
    }
    return render(request, "runs/run_detail.html", context)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_header(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = _run_for(request, run_id)
    return render(request, "runs/partials/run_header.html", _header_context(run))


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def step_table(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = _run_for(request, run_id)
    compare = request.GET.get("compare") == "1"
    context = _step_table_context(request, run, compare=compare)
    return render(request, "runs/partials/step_table.html", context)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def step_result(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    run = _run_for(request, run_id)
    try:
        step = selectors.step_of_run(run_id=run.run_id, pk=pk)
    except Step.DoesNotExist:
        raise Http404(f"run {run_id!r} has no step #{pk}") from None
    context = {
        "run": run,
        "step": step,
        "collapsed": request.GET.get("collapsed") == "1",
        "text": presenting.pretty(step.result),
        "head": json.dumps(step.result, ensure_ascii=False)[: selectors.RESULT_HEAD_CHARS],
        "inputs": presenting.pretty(step.inputs),
    }
    template = "runs/partials/step_result.html" if request.htmx else "runs/step_page.html"
    return render(request, template, context)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_preview(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The dry replay, summarised. Computed on demand; nothing is executed or written."""
    run = _run_for(request, run_id)
    return render(
        request,
        "runs/partials/preview.html" if request.htmx else "runs/run_preview.html",
        preview_context(run, compute_preview(run)),
    )


def preview_context(run: Run, preview: Preview) -> dict[str, Any]:
    """What ``runs/partials/preview.html`` shows (the action pages show it before confirming)."""
    return {
        "run": run,
        "preview": preview,
        "replays": preview.by_action("replay"),
        "rereads": preview.by_action("reread"),
        "stale": preview.by_action("stale"),
        "settle": preview.by_action("settle"),
        "execute": preview.by_action("execute"),
        "diverge": preview.by_action("diverge"),
        "downstream": [s for s in preview.steps if s.after_stale],
        "seconds": settings.RUNLEDGER_PREVIEW_SECONDS,
    }


# --- the raw ledger ------------------------------------------------------------------------


def _ledger_chunks(run: Run) -> Iterator[str]:
    encoder = DjangoJSONEncoder(ensure_ascii=False)
    fields = {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields}
    head = encoder.encode(fields)
    yield '{"run": ' + head + ',\n "steps": ['
    first = True
    for row in selectors.ledger_export(run_id=run.run_id):
        yield ("\n  " if first else ",\n  ") + encoder.encode(row)
        first = False
    yield "\n]}\n"


@require_GET
@login_required
@permission_required(EXPORT_LEDGER, raise_exception=True)
def ledger_json(request: HtmxHttpRequest, run_id: str) -> StreamingHttpResponse:
    """The whole ledger as JSON text, streamed a chunk of steps at a time.

    Operator-level (``runs.export_ledger``): a viewer reads the ledger on the page, one step at
    a time; taking every input and result of a run out in one file is an export.
    """
    run = _run_for(request, run_id, perm=EXPORT_LEDGER)
    response = StreamingHttpResponse(
        _ledger_chunks(run), content_type="application/json; charset=utf-8"
    )
    if request.GET.get("download") == "1":
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run.run_id)
        response["Content-Disposition"] = f'attachment; filename="{safe}.ledger.json"'
    return response
