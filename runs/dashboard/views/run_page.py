"""The run page: the header, the step chain a page at a time (with the stale comparison), a
step's whole result, the resume preview, and the raw ledger as JSON.

Every view is behind the login and declares its permission with a decorator, checked before
any lookup (so a refused user cannot tell a missing run from a present one); ``run_for``
checks it again where the run is loaded. Views only read: they call selectors and the dry
replay in ``ledger``, which write nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from ledger import adapters, selectors
from ledger.conf import conf
from ledger.inputs import queryable
from ledger.loops import transcript
from ledger.models import ACTIVE_STATUSES, FINAL_STATUSES, Reason, Run
from ledger.selectors import story
from ledger.selectors.usage import usage_of_run
from runs.dashboard import presenting
from runs.dashboard.handover import handover_context
from runs.dashboard.http import HtmxHttpRequest, run_for, step_for
from runs.dashboard.models import (
    APPROVE_SETTLEMENTS,
    EXPORT_LEDGER,
    OPERATE_RUNS,
    VIEW_DASHBOARD,
)
from runs.dashboard.questions import answer_fields
from runs.dashboard.roles import role_at_least

#: Audit events shown on a run page (the audit page has them all).
RUN_AUDIT_SHOWN = 20


# --- the run page --------------------------------------------------------------------------


def _page_asked(request: HttpRequest) -> int:
    """The page number in ``?page=`` (1 when it is not a number; the selector clamps it)."""
    try:
        return int(request.GET.get("page", "1"))
    except ValueError:
        return 1


def _step_table_context(request: HttpRequest, run: Run, *, compare: bool) -> dict[str, Any]:
    """The page asked for (clamped), or the page holding the step named by ``?step=``."""
    per_page = settings.RUNLEDGER_STEPS_PER_PAGE
    focus = str(request.GET.get("step", ""))
    table = selectors.step_page(
        run_id=run.run_id,
        page=_page_asked(request),
        per_page=per_page,
        focus=focus if queryable(focus) else "",
        blocked=run.blocked_step_id,
    )
    pages = max(math.ceil(table.total / per_page), 1)
    number = table.number
    start = (number - 1) * per_page
    steps = selectors.steps_for_page(run_id=run.run_id, pks=table.pks, with_inputs_head=True)
    preview = presenting.compute_preview(run) if compare else None
    views = presenting.step_views(
        steps,
        first_position=start,
        on_chain=table.on_chain,
        preview=preview,
        limit=selectors.RESULT_HEAD_CHARS,
    )
    presenting.with_inputs(views, story.inputs_heads(steps))
    presenting.with_row_urls(views, run.run_id)
    can_operate = request.user.has_perm(OPERATE_RUNS, run)
    blocked_page = None
    if run.blocked_step_id in table.positions:
        blocked_page = table.positions[run.blocked_step_id] // per_page + 1
    return {
        "run": run,
        "steps": views,
        "page": number,
        "pages": pages,
        "page_range": _page_links(number, pages),
        "total_steps": table.total,
        "on_chain": table.on_chain,
        "off_chain": table.total - table.on_chain,
        "compare": compare,
        "preview": preview,
        "preview_seconds": conf.RUNLEDGER_PREVIEW_SECONDS,
        "blocked_page": blocked_page,
        "focus": request.GET.get("step", ""),
        # While a worker has the run, the table follows it (the header does too).
        "active": run.status in ACTIVE_STATUSES,
        "refresh": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        # Asked once for the page, not in each row.
        "can_operate": can_operate,
        "can_settle": can_operate or request.user.has_perm(APPROVE_SETTLEMENTS, run),
        "fork_url": reverse("runs:fork", args=[run.run_id]),
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
    active = run.status in ACTIVE_STATUSES
    blocked = None
    if run.blocked_step_id:
        blocked = selectors.steps_by_id(run_id=run.run_id, step_ids=[run.blocked_step_id]).get(
            run.blocked_step_id
        )
    return {
        "run": run,
        "final": run.status in FINAL_STATUSES,
        "blocked_step": blocked,
        "has_lookup": blocked is not None and presenting.tool_has_lookup(blocked.tool),
        "waiting_proposal": selectors.settlements_waiting().filter(run_id=run.run_id).first(),
        "team": run.team,
        "waiting_gate": (
            selectors.gate_latest(run_id=run.run_id, step_id=run.blocked_step_id)
            if run.reason == "approval"
            else None
        ),
        "now": now,
        "code": presenting.code_check(run),
        "children": selectors.run_children(run_id=run.run_id, teams=[run.team]),
        "lease_expired": run.lease_expires_at is not None and run.lease_expires_at < now,
        "progress": selectors.run_progress(run_id=run.run_id) if active else None,
        "active": active,
        "batched": presenting.batched_note(run) if active else "",
        "refresh": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        "usage": usage_of_run(run_id=run.run_id),
        "inputs_text": presenting.pretty_capped(run.inputs),
        "result_text": presenting.pretty_capped(run.result),
        **_story_context(run),
    }


def _question_context(request: HtmxHttpRequest, run: Run) -> dict[str, Any]:
    """The question the run waits on (``ctx.ask``), its form's fields (None: a JSON box), and
    whether this person may answer it."""
    question = selectors.question_of(run=run)
    if question is None:
        return {"question": None}
    return {
        "question": question,
        "question_fields": answer_fields(question.schema),
        "question_schema": presenting.pretty_capped(question.schema),
        "can_answer": role_at_least(request.user, question.role, run.team),  # type: ignore[arg-type]
    }


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    compare = request.GET.get("compare") == "1"
    context = {
        **_header_context(run),
        **_step_table_context(request, run, compare=compare),
        "can_export": request.user.has_perm(EXPORT_LEDGER, run),
        "audit_events": list(selectors.audit_events(run_id=run.run_id)[:RUN_AUDIT_SHOWN]),
        "told": selectors.notifications_of_run(run_id=run.run_id),
        "audit_shown": RUN_AUDIT_SHOWN,
        "transcripts": transcript.transcripts(run_id=run.run_id, stale_step_ids=_stale(run)),
        "framework_transcripts": adapters.transcripts(run.run_id),
        "effect_findings": list(selectors.findings_for_run(run_id=run.run_id)[:20]),
        "archive": selectors.run_archive(run_id=run.run_id),
        "executions": selectors.run_executions(run.run_id),
        "mailbox": list(selectors.mailbox_of_run(run_id=run.run_id)),
        **_question_context(request, run),
        "mailbox_shown": selectors.MAILBOX_SHOWN,
        "checkpoints": selectors.graph_checkpoints_of_run(run_id=run.run_id),
        "checkpoints_shown": selectors.CHECKPOINTS_SHOWN,
        "acts": story.run_acts(run_id=run.run_id),
        **presenting.waterfall(run, timezone.now()),
        **handover_context(request, run),
        **_stream_context(run),
    }
    return render(request, "runs/run_detail.html", context)


def _story_context(run: Run) -> dict[str, Any]:
    """Who cancelled the run and why, the pause that holds it (the header, polled too)."""
    return {
        "cancelled_by": story.cancelled_by(run=run),
        "holding_pause": story.holding_pause(run=run),
    }


def _stale(run: Run) -> frozenset[str]:
    """The step a stale run is blocked on (the transcript marks it)."""
    return frozenset([run.blocked_step_id]) if run.reason == Reason.STALE else frozenset()


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_header(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    context = {**_header_context(run), "polled": bool(request.htmx)}
    response = render(request, "runs/partials/run_header.html", context)
    if request.htmx:
        # The step table refreshes right after the header (one clock for both); once the run
        # has stopped this is the last header poll, and the table's last refresh.
        response["HX-Trigger"] = "run-changed"
    return response


#: Events of the run's stream shown on its page (the API's stream has them all).
STREAM_SHOWN = 100


def _stream_context(run: Run) -> dict[str, Any]:
    events, total = selectors.stream_tail(run_id=run.run_id, limit=STREAM_SHOWN)
    return {
        "stream_events": [(e, presenting.pretty_capped(e.data)) for e in events],
        "stream_total": total,
        "stream_live": run.status in ACTIVE_STATUSES,
        "stream_refresh": STREAM_REFRESH_SECONDS,
    }


#: How often the run page reads the stream again while the run is queued or running.
STREAM_REFRESH_SECONDS = 1


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_stream(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The run's stream (what its agent emitted), polled while the run is queued or running."""
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    return render(request, "runs/partials/run_stream.html", {"run": run, **_stream_context(run)})


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def step_table(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    compare = request.GET.get("compare") == "1"
    context = _step_table_context(request, run, compare=compare)
    return render(request, "runs/partials/step_table.html", context)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def step_result(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    step = step_for(request, run.run_id, pk, perm=VIEW_DASHBOARD)
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
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    return render(
        request,
        "runs/partials/preview.html" if request.htmx else "runs/run_preview.html",
        presenting.preview_context(run, presenting.compute_preview(run)),
    )


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
    run = run_for(request, run_id, perm=EXPORT_LEDGER)
    response = StreamingHttpResponse(
        _ledger_chunks(run), content_type="application/json; charset=utf-8"
    )
    if request.GET.get("download") == "1":
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run.run_id)
        response["Content-Disposition"] = f'attachment; filename="{safe}.ledger.json"'
    return response
