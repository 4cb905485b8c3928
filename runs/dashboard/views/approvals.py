"""Approval gates: the Approvals queue (beside Settle), one gate with its exact arguments and
digest, approve or reject with a reason, and the signed link from a gate's notification.

A view parses, checks the approver role, calls one transition of ``ledger.transitions.gates``
and renders; a refusal (a second operator clicking the same button, an expired gate, a link
for another user, used, or expired) renders the page again with the reason and changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ledger import selectors, transitions
from ledger.models import Gate, GateStatus
from ledger.selectors import evidence
from runs.dashboard import presenting
from runs.dashboard.http import (
    HtmxHttpRequest,
    render_refused,
    require,
    require_in_team,
    seen_teams,
)
from runs.dashboard.models import APPROVE_SETTLEMENTS, VIEW_DASHBOARD
from runs.dashboard.operator_forms import DecideForm, RejectForm

QUEUE_PAGE = 100

#: The refusal of an approval whose arguments disagree with the evidence, unacknowledged.
ACKNOWLEDGE_FIRST = (
    "these arguments disagree with the run's evidence (see the warning): check them, "
    "tick “I checked”, and approve again"
)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def approval_queue(request: HtmxHttpRequest) -> HttpResponse:
    """Every gate waiting for a decision, oldest first; htmx refreshes the table in place."""
    context = {
        "gates": selectors.gate_queue(limit=QUEUE_PAGE, teams=seen_teams(request)),
        "can_approve": request.user.has_perm(APPROVE_SETTLEMENTS),
        "username": request.user.get_username(),
        "now": timezone.now(),
    }
    if request.htmx:
        return render(request, "runs/partials/approval_rows.html", context)
    return render(request, "runs/approvals.html", context)


def _gate_for(request: HtmxHttpRequest, pk: int, *, perm: str) -> Gate:
    require(request, perm)
    gate = selectors.gate_get(pk)
    if gate is None:
        raise Http404(f"no gate #{pk}")
    require_in_team(request, gate, perm=perm, missing=f"no gate #{pk}")
    return gate


def _context(request: HtmxHttpRequest, gate: Gate, **extra: Any) -> dict[str, Any]:
    fresh = selectors.gate_get(gate.pk) or gate
    sources = evidence.gate_sources(gate=fresh)
    return {
        "gate": fresh,
        "run": fresh.run,
        "arguments_text": presenting.pretty(_arguments(fresh)),
        # The evidence beside the arguments: the run's inputs and what its reads returned.
        "run_inputs_text": presenting.pretty_capped(fresh.run.inputs, limit=4_000),
        "reads": [(label, presenting.pretty_capped(v, limit=4_000)) for label, v in sources[1:]],
        "contradictions": evidence.contradictions(_arguments(fresh), sources),
        "waiting": fresh.status == GateStatus.WAITING and fresh.expires_at > timezone.now(),
        "can_approve": request.user.has_perm(APPROVE_SETTLEMENTS, fresh),
        "approved_already": request.user.get_username() in fresh.approved_by,
        "decide_form": DecideForm(),
        "reject_form": RejectForm(),
        "link": "",
        **extra,
    }


def _arguments(gate: Gate) -> Any:
    return json.loads(gate.arguments_text)


@require_GET
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def approval_page(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One gate: the run, the step, the exact canonical arguments and their digest."""
    gate = _gate_for(request, pk, perm=VIEW_DASHBOARD)
    return render(request, "runs/approval.html", _context(request, gate))


@require_POST
@login_required
@permission_required(APPROVE_SETTLEMENTS, raise_exception=True)
def approval_approve(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _decide(request, _gate_for(request, pk, perm=APPROVE_SETTLEMENTS), "approve")


@require_POST
@login_required
@permission_required(APPROVE_SETTLEMENTS, raise_exception=True)
def approval_reject(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _decide(request, _gate_for(request, pk, perm=APPROVE_SETTLEMENTS), "reject")


def _decide(
    request: HtmxHttpRequest, gate: Gate, decision: str, *, link: str = "", nonce: str = ""
) -> HttpResponse:
    form = (DecideForm if decision == "approve" else RejectForm)(request.POST)
    if not form.is_valid():
        context = _context(request, gate, link=link, form_errors=form.errors)
        return render(request, "runs/approval.html", context, status=400)
    reason = form.cleaned_data["reason"]
    if decision == "approve" and not form.cleaned_data["acknowledge"]:
        flagged = evidence.contradictions(_arguments(gate), evidence.gate_sources(gate=gate))
        if flagged:
            # The page's warning, checked again here: approving arguments that disagree with
            # the run's own evidence needs the approver's explicit acknowledgement.
            context = _context(
                request, gate, link=link, form_errors=ACKNOWLEDGE_FIRST, ack_missing=True
            )
            return render(request, "runs/approval.html", context, status=400)
    try:
        if decision == "approve":
            done = transitions.gate_approve(
                gate=gate, by=request.user, reason=reason, link_nonce=nonce
            )
        else:
            done = transitions.gate_reject(
                gate=gate, by=request.user, reason=reason, link_nonce=nonce
            )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/approval.html", _context(request, gate), exc)
    messages.success(request, _said(done))
    return redirect("runs:approval", pk=done.pk)


def _said(gate: Gate) -> str:
    what = f"{gate.tool} ({gate.step_id}) of {gate.run_id}"
    if gate.status == GateStatus.WAITING:
        return (
            f"Approved {what}: {len(gate.approved_by)} of {gate.approvers_required}; "
            "it waits for a different approver."
        )
    if gate.status == GateStatus.APPROVED:
        return f"Approved {what}: the run is queued; a worker sends the effect once."
    if gate.on_reject == "fail":
        return f"Rejected {what}: the run failed; the effect is never sent."
    return f"Rejected {what}: the run is queued; the agent gets ApprovalRejected."


@require_http_methods(["GET", "POST"])
@login_required
def approval_link(request: HtmxHttpRequest, token: str) -> HttpResponse:
    """The signed link of a gate's notification: for the signed-in user it was made for, once,
    until it expires; it opens the gate page with its buttons (approving still needs the role)."""
    try:
        link = transitions.gate_link_check(token=token, username=request.user.get_username())
    except transitions.OperationError as exc:
        return render(request, "runs/approval_link_refused.html", {"refused": str(exc)}, status=403)
    gate = link.gate
    if not request.user.has_perm(VIEW_DASHBOARD, gate.run):
        # Another team's gate: answered as a link whose gate is gone.
        gone = "the gate of this approval link no longer exists"
        return render(request, "runs/approval_link_refused.html", {"refused": gone}, status=403)
    if request.method == "POST":
        require(request, APPROVE_SETTLEMENTS)
        require_in_team(request, gate, perm=APPROVE_SETTLEMENTS, missing="no such gate")
        decision = request.POST.get("decision", "")
        if decision not in ("approve", "reject"):
            return render(
                request,
                "runs/approval.html",
                _context(request, gate, link=token, refused="choose approve or reject"),
                status=400,
            )
        return _decide(request, gate, decision, link=token, nonce=link.nonce)
    return render(request, "runs/approval.html", _context(request, gate, link=token))
