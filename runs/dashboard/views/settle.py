"""Settling ambiguous effects by hand: the queue, the evidence, propose, approve, reject.

A ``started`` effect whose tool cannot say whether it happened stops its run. An operator
looks at the evidence and proposes how it ended; with approval on, a different person with the
approver role approves it, and the ledger change and the queueing of the run are one
transaction after which the run is announced to the workers (``ledger.signals.run_queued``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core import signing
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from ledger.conf import conf
from ledger.models import SettlementStatus, Step
from ledger.selectors.evidence import last_lookup_answer
from runs.dashboard import presenting
from runs.dashboard.http import (
    HtmxHttpRequest,
    permission_any,
    render_refused,
    seen_teams,
    settlement_for,
    step_for,
)
from runs.dashboard.models import APPROVE_SETTLEMENTS, OPERATE_RUNS, VIEW_DASHBOARD
from runs.dashboard.operator_forms import DecideForm, RejectForm, SettleForm

#: The refusal of an approval whose value disagrees with its evidence, unacknowledged.
OPEN_THE_EVIDENCE = (
    "approve from this page, with the evidence in front of you: read it, then approve again"
)
#: How long the settle page's approval stays good: a page left open overnight is read again.
EVIDENCE_SEEN_SECONDS = 12 * 3600


def evidence_seen_token(*, settlement_pk: int, user_pk: int | None) -> str:
    """What the settle page's Approve carries: this person opened this proposal's evidence."""
    return signing.dumps([settlement_pk, user_pk], salt="runledger.evidence-seen")


def evidence_was_seen(token: str, *, settlement_pk: int, user_pk: int | None) -> bool:
    try:
        seen = signing.loads(token, salt="runledger.evidence-seen", max_age=EVIDENCE_SEEN_SECONDS)
    except signing.BadSignature:
        return False
    return bool(seen == [settlement_pk, user_pk])


ACKNOWLEDGE_FIRST = (
    "the proposed result disagrees with the evidence (see the warning above): "
    "check it, tick “I checked”, and approve again"
)

#: Who may open a settle page or ask the tool again: an operator or an approver.
SETTLE_READERS = (OPERATE_RUNS, APPROVE_SETTLEMENTS)

QUEUE_PAGE = 100


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def settlement_queue(request: HtmxHttpRequest) -> HttpResponse:
    """Every started effect waiting for a person, oldest first, 100 a page."""
    try:
        page = max(int(request.GET.get("page", "1")), 1)
    except ValueError:
        page = 1
    page = min(page, 10_000)  # bounded: an OFFSET deeper than this is never useful
    items = selectors.settlement_queue(
        limit=QUEUE_PAGE + 1, offset=(page - 1) * QUEUE_PAGE, teams=seen_teams(request)
    )
    context = {
        "rows": presenting.queue_rows(items[:QUEUE_PAGE]),
        "page": page,
        "more": len(items) > QUEUE_PAGE,
        "first": (page - 1) * QUEUE_PAGE,
        "can_operate": request.user.has_perm(OPERATE_RUNS),
        "can_approve": request.user.has_perm(APPROVE_SETTLEMENTS),
        "username": request.user.get_username(),
        "approval_required": selectors.approval_required(),
    }
    return render(request, "runs/settlement_queue.html", context)


def _settle_context(
    request: HtmxHttpRequest,
    step: Step,
    *,
    form: SettleForm | None = None,
    typed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The settle page: the evidence (read fresh), the forms, and who may do what.

    ``typed`` (what a refused form held) refills a new form that carries the step's version
    now, so that sending it again is a decision on the current state.
    """
    evidence = selectors.settlement_evidence(step=step)
    row, user = evidence.step, request.user
    proposal = evidence.proposal
    if form is None:
        form = SettleForm(initial={**(typed or {}), "seen_version": row.version})
    return {
        "run": evidence.run,
        "step": row,
        "evidence": evidence,
        "lookup": evidence.lookup_answer,
        "lookup_text": presenting.pretty(evidence.lookup_answer.get("result")),
        "inputs_text": presenting.pretty_capped(row.inputs),
        "errors": row.errors or ([{"error": row.error}] if row.error else []),
        "waiting": (timezone.now() - row.updated_at).total_seconds(),
        "form": form,
        "decide_form": DecideForm(),
        "evidence_seen": (
            evidence_seen_token(settlement_pk=proposal.pk, user_pk=user.pk)
            if proposal is not None
            else ""
        ),
        "reject_form": RejectForm(),
        "can_operate": user.has_perm(OPERATE_RUNS, row),
        "can_approve": user.has_perm(APPROVE_SETTLEMENTS, row),
        "is_proposer": proposal is not None and proposal.proposed_by_name == user.get_username(),
        "proposal_result_text": presenting.pretty(proposal.result) if proposal else "",
        "contradictions": presenting.settlement_contradictions(
            result=proposal.result if proposal else None,
            step=row,
            lookup_answer=evidence.lookup_answer,
        ),
        "result_placeholder": presenting.result_placeholder(row.inputs),
        "proposal_outdated": proposal is not None and selectors.settlement_is_outdated(proposal),
        "max_result_bytes": conf.RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES,
    }


def _render_settle(
    request: HtmxHttpRequest, step: Step, *, status: int = 200, **extra: Any
) -> HttpResponse:
    form, typed = extra.pop("form", None), extra.pop("typed", None)
    context = {**_settle_context(request, step, form=form, typed=typed), **extra}
    return render(request, "runs/settle.html", context, status=status)


@require_GET
@login_required
@permission_any(*SETTLE_READERS)
def settle_page(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    """The evidence and the three outcomes (operators), the waiting proposal (approvers).

    Opening it writes nothing; the form carries the step's version as the person sees it.
    """
    return _render_settle(request, step_for(request, run_id, pk, perm=SETTLE_READERS))


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def settle_propose(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    step = step_for(request, run_id, pk, perm=OPERATE_RUNS)
    form = SettleForm(request.POST)
    if not form.is_valid():
        return _render_settle(request, step, form=form, status=400)
    data = form.cleaned_data
    flagged = presenting.settlement_contradictions(
        result=data["parsed_result"],
        step=step,
        lookup_answer=last_lookup_answer(step=step),
    )
    if flagged and not data["acknowledge"]:
        # Shown before anything is proposed: the proposer checks, then ticks and sends again.
        return _render_settle(request, step, form=form, status=400, propose_flagged=flagged)
    try:
        settlement = transitions.settlement_propose(
            step=step,
            outcome=data["outcome"],
            result=data["parsed_result"],
            reason=data["reason"],
            by=request.user,
            seen_version=data["seen_version"],
        )
    except transitions.OperationError as exc:
        return _refused(request, step, exc, form)
    if settlement.status == SettlementStatus.APPLIED:
        messages.success(
            request,
            f"Settled {step.step_id} as “{settlement.get_outcome_display()}”: "
            f"{_after(settlement.run.status)}",
        )
        return redirect("runs:detail", run_id=run_id)
    messages.success(
        request,
        f"Proposed “{settlement.get_outcome_display()}” for {step.step_id}. "
        "It waits for a different person with the approver role.",
    )
    return redirect("runs:settle", run_id=run_id, pk=pk)


def _refused(
    request: HtmxHttpRequest, step: Step, exc: transitions.OperationError, form: SettleForm
) -> HttpResponse:
    """The page again with the refusal, the current state, and what was typed."""
    typed = {k: form.data.get(k) for k in ("outcome", "result", "reason")}
    context = _settle_context(request, step, typed=typed)
    return render_refused(request, "runs/settle.html", context, exc)


def _refused_plain(
    request: HtmxHttpRequest, step: Step, exc: transitions.OperationError
) -> HttpResponse:
    """The page again with the refusal and the current state (no form was typed)."""
    return render_refused(request, "runs/settle.html", _settle_context(request, step), exc)


def _after(run_status: str) -> str:
    if run_status == "queued":
        return "the run is queued; a worker resumes it now."
    return f"the run is {run_status}."


@require_POST
@login_required
@permission_any(*SETTLE_READERS)
def settle_lookup(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    """Ask the tool's reconcile again now; the answer is recorded (audit), the step unchanged."""
    step = step_for(request, run_id, pk, perm=SETTLE_READERS)
    try:
        answer = transitions.step_reconcile_again(step=step, by=request.user)
    except transitions.OperationError as exc:
        return _refused_plain(request, step, exc)
    context: dict[str, Any] = {
        "answer": answer,
        "answer_text": presenting.pretty(answer.result),
        "lookup_at": answer.event.at,
    }
    if request.htmx:
        return render(request, "runs/partials/lookup_answer.html", {"step": step, **context})
    return _render_settle(request, step, **context)


@require_POST
@login_required
@permission_required(APPROVE_SETTLEMENTS, raise_exception=True)
def settlement_approve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    settlement = settlement_for(request, pk, perm=APPROVE_SETTLEMENTS)
    form = DecideForm(request.POST)
    if not form.is_valid():
        return _render_settle(request, settlement.step_row, status=400, decide_errors=form.errors)
    if settlement.status == SettlementStatus.PROPOSED and not evidence_was_seen(
        str(request.POST.get("evidence_seen", "")), settlement_pk=pk, user_pk=request.user.pk
    ):
        # Approving is a decision on the evidence: only the settle page, which shows it, can
        # send one (the queue links there). A bare POST lands on that page, nothing decided.
        return _render_settle(
            request, settlement.step_row, status=400, decide_errors=OPEN_THE_EVIDENCE
        )
    flagged = presenting.settlement_contradictions(
        result=settlement.result,
        step=settlement.step_row,
        lookup_answer=last_lookup_answer(step=settlement.step_row),
    )
    if flagged and not form.cleaned_data["acknowledge"]:
        # The same check the page showed, made again on the server: an approval of a result
        # that disagrees with its evidence needs the approver's explicit acknowledgement.
        return _render_settle(
            request,
            settlement.step_row,
            status=400,
            decide_errors=ACKNOWLEDGE_FIRST,
            ack_missing=True,
        )
    try:
        applied = transitions.settlement_approve(
            settlement=settlement,
            by=request.user,
            reason=form.cleaned_data["reason"],
        )
    except transitions.OperationError as exc:
        return _refused_plain(request, settlement.step_row, exc)
    messages.success(
        request,
        f"Approved {applied.proposed_by_name}'s “{applied.get_outcome_display()}” for "
        f"{applied.step_id}: {_after(applied.run.status)}",
    )
    return redirect(reverse("runs:detail", args=[settlement.run_id]))


@require_POST
@login_required
@permission_any(APPROVE_SETTLEMENTS, OPERATE_RUNS)
def settlement_reject(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """An approver refuses a proposal, or its proposer (an operator) withdraws it."""
    settlement = settlement_for(request, pk, perm=(APPROVE_SETTLEMENTS, OPERATE_RUNS))
    own = settlement.proposed_by_name == request.user.get_username()
    if not (request.user.has_perm(APPROVE_SETTLEMENTS, settlement) or own):
        return _render_settle(
            request,
            settlement.step_row,
            status=403,
            refused="only an approver, or the person who proposed it, can reject a proposal",
        )
    form = RejectForm(request.POST)
    if not form.is_valid():
        return _render_settle(request, settlement.step_row, status=400, reject_errors=form.errors)
    try:
        transitions.settlement_reject(
            settlement=settlement, by=request.user, reason=form.cleaned_data["reason"]
        )
    except transitions.OperationError as exc:
        return _refused_plain(request, settlement.step_row, exc)
    verb = "Withdrew" if own else "Rejected"
    messages.success(
        request, f"{verb} the proposal for {settlement.step_id}; the step is unchanged."
    )
    return redirect("runs:settle", run_id=settlement.run_id, pk=settlement.step_row_id)
