"""Approval gates: the gates waiting for a decision, one gate with its exact canonical arguments
and digest, approve and reject — the transitions of ``ledger.transitions.gates``, with their
refusals (a decided, void or expired gate, a run that does not wait at it, the same person
twice). A decision is a person's: it needs the token of a user with the approver role, never a
service's, as a settlement's approval does; the audit names that person."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router
from pydantic import Field

from ledger import selectors, transitions
from ledger.models import Gate
from runs.api import problems
from runs.api.auth import actor, check_reach, reach, require, require_person_approver
from runs.api.routers.runs import REFUSALS
from runs.api.schemas import DecideIn, GateOut, RejectIn, Strict, refuse_unknown_query

router = Router(tags=["approvals"])
PAGE = 100


class PageQuery(Strict):
    page: int = Field(default=1, ge=1, le=10_000)


def _gate(request: HttpRequest, gate_id: int, action: str = "read") -> Gate:
    """The gate, when the token may read its run's team (404 otherwise, as for none) and do
    ``action`` there (403 otherwise)."""
    gate = selectors.gate_get(gate_id)
    if gate is None:
        raise problems.not_found(f"no gate #{gate_id}")
    check_reach(request, gate.run, action, f"no gate #{gate_id}")
    return gate


@router.get(
    "/approvals",
    response={200: list[GateOut], **REFUSALS},
    summary="Gates waiting for a decision",
)
def waiting(request: HttpRequest, q: Query[PageQuery]) -> list[GateOut]:
    """Effects waiting for a person's approval before they are sent, oldest first (100 a
    page), each with the exact arguments and their digest."""
    require(request, "read")
    refuse_unknown_query(request, PageQuery)
    return [
        GateOut.of(g)
        for g in selectors.gate_queue(limit=PAGE, offset=(q.page - 1) * PAGE, teams=reach(request))
    ]


@router.get("/approvals/{gate_id}", response={200: GateOut, **REFUSALS}, summary="Read a gate")
def read(request: HttpRequest, gate_id: int) -> GateOut:
    require(request, "read")
    return GateOut.of(_gate(request, gate_id))


@router.post(
    "/approvals/{gate_id}/approve",
    response={200: GateOut, **REFUSALS},
    summary="Approve a gate",
    description="A person's decision: needs the token of a user with the approver role. With "
    "two approvers required the first approval leaves the gate waiting for a different person; "
    "the last one queues the run, whose worker sends the effect once, with these arguments.",
)
def approve(request: HttpRequest, gate_id: int, body: DecideIn) -> GateOut:
    return _decide(request, gate_id, transitions.gate_approve, body.reason)


@router.post(
    "/approvals/{gate_id}/reject",
    response={200: GateOut, **REFUSALS},
    summary="Reject a gate",
    description="A person's decision, with a reason: the effect is never sent; the agent gets "
    "`ApprovalRejected` (the run is queued) or the run fails, as the tool declares.",
)
def reject(request: HttpRequest, gate_id: int, body: RejectIn) -> GateOut:
    return _decide(request, gate_id, transitions.gate_reject, body.reason)


def _decide(request: HttpRequest, gate_id: int, decide: Any, reason: str) -> GateOut:
    """A person's decision on a gate (``gate_approve`` or ``gate_reject``): the token is
    checked before the gate is read; a refusal of the transition wrote nothing."""
    token = require_person_approver(request)
    gate = _gate(request, gate_id, "approve")
    try:
        decide(gate=gate, by=actor(token), reason=reason)
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return GateOut.of(_gate(request, gate_id))
