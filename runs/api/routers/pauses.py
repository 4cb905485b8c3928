"""Pauses: list them (with the runs each holds now), pause a tool (in every agent), an agent or
a run with a reason, and lift a pause with the count of held runs you were shown — the
transitions of ``ledger.transitions.pauses``, with their refusals (an unknown target, a second
pause of it, a lifted pause, a count that moved)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from ledger import selectors, transitions
from ledger.models import Pause
from runs.api import problems
from runs.api.auth import actor, require
from runs.api.routers.runs import REFUSALS
from runs.api.schemas import LiftIn, PauseIn, PauseOut, Strict, refuse_unknown_query

router = Router(tags=["pauses"])
LISTED = 200


class ListQuery(Strict):
    active: bool = True


def _out(pause_id: int) -> PauseOut:
    pause = selectors.pauses_list(active=False).filter(pk=pause_id).first()
    if pause is None:
        raise problems.not_found(f"no pause #{pause_id}")
    return PauseOut.of(pause, held=pause.held)


@router.get("/pauses", response={200: list[PauseOut], **REFUSALS}, summary="List pauses")
def pauses(request: HttpRequest, q: Query[ListQuery]) -> list[PauseOut]:
    """The active pauses (``active=false``: every pause, lifted ones too), newest first, each
    with ``held``: the runs it holds now (at most 200 pauses)."""
    require(request, "read")
    refuse_unknown_query(request, ListQuery)
    rows: list[Pause] = list(selectors.pauses_list(active=q.active)[:LISTED])
    return [PauseOut.of(p, held=p.held) for p in rows]


@router.get("/pauses/{pause_id}", response={200: PauseOut, **REFUSALS}, summary="Read a pause")
def read(request: HttpRequest, pause_id: int) -> PauseOut:
    require(request, "read")
    return _out(pause_id)


@router.post(
    "/pauses",
    response={201: PauseOut, **REFUSALS},
    summary="Pause a tool, an agent or a run",
    description="A run reaching a step of a paused tool (or any step of a paused agent or run) "
    "stops `paused`, costing no resume budget, until the pause is lifted.",
)
def create(request: HttpRequest, body: PauseIn) -> Status[PauseOut]:
    token = require(request, "operate")
    try:
        pause = transitions.pause_create(
            scope=body.scope,
            target=body.target,
            by=actor(token),
            reason=body.reason,
            expires_at=body.expires_at,
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return Status(201, _out(pause.pk))


@router.post(
    "/pauses/{pause_id}/lift",
    response={200: PauseOut, **REFUSALS},
    summary="Lift a pause and queue the runs it holds",
    description="`expected` is the `held` count you read: when more or fewer runs are held "
    "now the lift is refused (409) and nothing is queued.",
)
def lift(request: HttpRequest, pause_id: int, body: LiftIn) -> PauseOut:
    token = require(request, "operate")
    if not Pause.objects.filter(pk=pause_id).exists():
        raise problems.not_found(f"no pause #{pause_id}")
    try:
        transitions.pause_lift(
            pause_id=pause_id, by=actor(token), reason=body.reason, expected=body.expected
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return _out(pause_id)
