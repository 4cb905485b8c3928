"""Settling a started effect by hand: the waiting effects, propose, approve, reject — the same
transitions, refusals and four-eyes rule as the dashboard (``runs.dashboard.views.settle``)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status
from pydantic import Field

from ledger import selectors, transitions
from ledger.models import Settlement
from runs.api import problems
from runs.api.auth import actor, check_reach, reach, require, require_person_approver
from runs.api.routers.runs import REFUSALS, run_or_404, step_or_404
from runs.api.schemas import (
    DecideIn,
    ProposeIn,
    RejectIn,
    SettlementOut,
    Strict,
    WaitingEffectOut,
    refuse_unknown_query,
)

router = Router(tags=["settlements"])
PAGE = 100


def _settlement(request: HttpRequest, pk: int, action: str = "read") -> Settlement:
    """The settlement, when the token may read its run's team (404 otherwise, as for none) and
    do ``action`` there (403 otherwise)."""
    try:
        found = selectors.settlement_detail(pk=pk)
    except Settlement.DoesNotExist:
        raise problems.not_found(f"no settlement #{pk}") from None
    check_reach(request, found.run, action, f"no settlement #{pk}")
    return found


class PageQuery(Strict):
    page: int = Field(default=1, ge=1, le=10_000)


@router.get(
    "/settlements",
    response={200: list[WaitingEffectOut], **REFUSALS},
    summary="Effects waiting for a person",
)
def waiting(request: HttpRequest, q: Query[PageQuery]) -> list[WaitingEffectOut]:
    """Started effects whose runs wait for a person, oldest first, each with its open proposal
    (100 a page)."""
    require(request, "read")
    refuse_unknown_query(request, PageQuery)
    items = selectors.settlement_queue(limit=PAGE, offset=(q.page - 1) * PAGE, teams=reach(request))
    return [
        WaitingEffectOut(
            run_id=i.run_id,
            step=i.step.pk,
            step_id=i.step_id,
            step_version=i.step.version,
            tool=i.tool,
            effect_key=i.effect_key,
            since=i.since,
            proposal=SettlementOut.of(i.proposal) if i.proposal else None,
        )
        for i in items
    ]


@router.get("/settlements/{pk}", response={200: SettlementOut, **REFUSALS}, summary="Read")
def read(request: HttpRequest, pk: int) -> SettlementOut:
    require(request, "read")
    return SettlementOut.of(_settlement(request, pk))


@router.post(
    "/runs/{run_id}/steps/{step}/settlements",
    response={201: SettlementOut, **REFUSALS},
    summary="Propose how a started effect ended",
    description="With approval on (the default) the proposal waits for a different person "
    "with the approver role; with it off it is applied at once.",
)
def propose(request: HttpRequest, run_id: str, step: int, body: ProposeIn) -> Status[SettlementOut]:
    token = require(request, "propose")
    run = run_or_404(request, run_id, "propose")
    row = step_or_404(run, step)
    try:
        made = transitions.settlement_propose(
            step=row,
            outcome=body.outcome,
            result=body.result,
            reason=body.reason,
            by=actor(token),
            seen_version=body.seen_version,
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return Status(201, SettlementOut.of(made))


@router.post(
    "/settlements/{pk}/approve", response={200: SettlementOut, **REFUSALS}, summary="Approve"
)
def approve(request: HttpRequest, pk: int, body: DecideIn) -> SettlementOut:
    """A person's decision: needs the token of a user with the approver role who did not
    propose it (the four-eyes rule)."""
    token = require_person_approver(request)
    settlement = _settlement(request, pk, "approve")
    try:
        done = transitions.settlement_approve(
            settlement=settlement, by=actor(token), reason=body.reason
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return SettlementOut.of(done)


@router.post(
    "/settlements/{pk}/reject", response={200: SettlementOut, **REFUSALS}, summary="Reject"
)
def reject(request: HttpRequest, pk: int, body: RejectIn) -> SettlementOut:
    """An approver refuses a proposal, or its proposer (an operator token) withdraws it."""
    from runs.api.auth import token_of

    token = token_of(request)
    settlement = _settlement(request, pk)
    run = settlement.run
    by = actor(token)
    name = by if isinstance(by, str) else by.get_username()
    own = settlement.proposed_by_name == name
    if not (token.may("approve", run) or (own and token.may("propose", run))):
        raise problems.forbidden(
            "only an approver, or the one who proposed it, can reject a proposal"
        )
    try:
        transitions.settlement_reject(settlement=settlement, by=by, reason=body.reason)
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return SettlementOut.of(_settlement(request, pk))
