"""The effect audit pages: the kept reports of ``ledger.processes.effect_audit`` and their
findings; an
operator can run a bounded pass from here (the same as ``manage.py audit_effects``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors
from ledger.errors import InvalidInput
from ledger.inputs import parse_whole_number
from ledger.models import EffectAudit
from ledger.processes.effect_audit import audit_effects
from runs.dashboard.http import HtmxHttpRequest, filter_text, require_every_team
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD

AUDITS_SHOWN = 20
#: A pass started from the page is bounded so that the request stays short.
PAGE_PASS_LIMIT = 200
PAGE_PASS_RATE = 20.0


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def effect_audits(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    require_every_team(request, VIEW_DASHBOARD)  # an audit pass reads every team's effects
    audits = list(selectors.effect_audits()[:AUDITS_SHOWN])
    shown = audits[0] if pk is None and audits else None
    if pk is not None:
        shown = EffectAudit.objects.filter(pk=pk).first()
        if shown is None:
            raise Http404("no such effect audit")
    context = {
        "audits": audits,
        "shown": shown,
        "findings": list(shown.findings.order_by("id")[:500]) if shown else [],
        "can_run": request.user.has_perm(OPERATE_RUNS),
        "page_limit": PAGE_PASS_LIMIT,
    }
    return render(request, "runs/effects.html", context)


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def effect_audit_run(request: HtmxHttpRequest) -> HttpResponse:
    """Run one bounded pass (or continue an unfinished one) and show its report."""
    require_every_team(request, OPERATE_RUNS)
    resume = str(request.POST.get("resume", "")).strip()
    try:
        audit_id = parse_whole_number(resume, what="resume", hi=2**63 - 1) if resume else None
    except InvalidInput:
        raise Http404("no such effect audit") from None
    if audit_id is not None and not EffectAudit.objects.filter(pk=audit_id).exists():
        raise Http404("no such effect audit")
    agent = filter_text(request, "agent", source=request.POST)
    audit = audit_effects(
        agent=agent,
        limit=PAGE_PASS_LIMIT,
        rate=PAGE_PASS_RATE,
        resume=audit_id,
        by=request.user.get_username(),
    )
    return redirect("runs:effect_audit", pk=audit.pk)
