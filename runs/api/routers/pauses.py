"""Pauses: list them (with the runs each holds now), pause a tool (in every agent), an agent or
a run with a reason, and lift a pause with the count of held runs you were shown — the
transitions of ``ledger.transitions.pauses``, with their refusals (an unknown target, a second
pause of it, a lifted pause, a count that moved)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from ledger import selectors, transitions
from ledger.models import Pause, PauseScope
from runs.api import problems
from runs.api.auth import actor, reach, require, whole_reach
from runs.api.routers.runs import REFUSALS, named_run
from runs.api.schemas import LiftIn, PauseIn, PauseOut, Strict, refuse_unknown_query

router = Router(tags=["pauses"])
LISTED = 200


class ListQuery(Strict):
    active: bool = True


def _out(request: HttpRequest, pause_id: int) -> PauseOut:
    """The pause as this token sees it: a run's pause of a team it may not read answers 404;
    a tool's or agent's counts ``held`` in the token's teams only."""
    teams = reach(request)
    pause = selectors.pauses_list(active=False, teams=teams).filter(pk=pause_id).first()
    if pause is None:
        raise problems.not_found(f"no pause #{pause_id}")
    return PauseOut.of(pause, held=pause.held)


def _check_target(request: HttpRequest, scope: str, target: str) -> None:
    """Pausing or lifting: a run's pause needs the run's team in reach (404 otherwise, 403
    without operate there); a tool's or agent's, which holds every team's runs, a token that
    reaches every team (403)."""
    if scope == PauseScope.RUN:
        named_run(request, target, "operate", f"no run {target!r}")
    else:
        whole_reach(request, "operate", f"a pause of a{'n' if scope == 'agent' else ''} {scope}")


@router.get("/pauses", response={200: list[PauseOut], **REFUSALS}, summary="List pauses")
def pauses(request: HttpRequest, q: Query[ListQuery]) -> list[PauseOut]:
    """The active pauses (``active=false``: every pause, lifted ones too), newest first, each
    with ``held``: the runs it holds now (at most 200 pauses)."""
    require(request, "read")
    refuse_unknown_query(request, ListQuery)
    rows: list[Pause] = list(selectors.pauses_list(active=q.active, teams=reach(request))[:LISTED])
    return [PauseOut.of(p, held=p.held) for p in rows]


@router.get("/pauses/{pause_id}", response={200: PauseOut, **REFUSALS}, summary="Read a pause")
def read(request: HttpRequest, pause_id: int) -> PauseOut:
    require(request, "read")
    return _out(request, pause_id)


@router.post(
    "/pauses",
    response={201: PauseOut, **REFUSALS},
    summary="Pause a tool, an agent or a run",
    description="A run reaching a step of a paused tool (or any step of a paused agent or run) "
    "stops `paused`, costing no resume budget, until the pause is lifted. A run's pause needs "
    "the run's team in reach (a run of another team is refused as one that does not exist, "
    "422); a tool's or agent's holds every team's runs and "
    "needs a token that reaches every team (403 otherwise).",
)
def create(request: HttpRequest, body: PauseIn) -> Status[PauseOut]:
    token = require(request, "operate")
    _check_target(request, body.scope, body.target)
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
    return Status(201, _out(request, pause.pk))


@router.post(
    "/pauses/{pause_id}/lift",
    response={200: PauseOut, **REFUSALS},
    summary="Lift a pause and queue the runs it holds",
    description="`expected` is the `held` count you read: when more or fewer runs are held "
    "now the lift is refused (409) and nothing is queued.",
)
def lift(request: HttpRequest, pause_id: int, body: LiftIn) -> PauseOut:
    token = require(request, "operate")
    found = _out(request, pause_id)  # 404 for a pause of a run out of reach
    _check_target(request, found.scope, found.target)
    try:
        transitions.pause_lift(
            pause_id=pause_id, by=actor(token), reason=body.reason, expected=body.expected
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return _out(request, pause_id)
