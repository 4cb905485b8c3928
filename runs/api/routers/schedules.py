"""Schedules: add one (a cron expression in a time zone, or an interval; the agent, its inputs,
a policy for missed ticks, each run's start options), list them, read one, pause, resume and
remove one — ``ledger.transitions.schedules``, with its refusals (a cron expression or time zone
that does not parse, an interval of 0, an unknown agent, inputs the agent refuses, a name in
use, a change of a removed schedule). Operators manage, viewers read. There is no edit: remove
a schedule and add it again (a new id; its old runs keep the old one). A schedule is named in
the path by its id (``sch_…``) or its live name."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status
from pydantic import Field

from ledger import registry, selectors, transitions
from ledger.errors import OperationError
from ledger.inputs import queryable
from ledger.models import Schedule
from ledger.teams import default_team
from runs.api import problems
from runs.api.auth import actor, check_reach, reach, require
from runs.api.routers.runs import REFUSALS, check_team_or_422
from runs.api.schemas import (
    ScheduleChangeIn,
    ScheduleIn,
    ScheduleOut,
    Strict,
    refuse_unknown_query,
)
from runs.dashboard.teams import scope_runs

router = Router(tags=["schedules"])
LISTED = 500


class ScheduleListQuery(Strict):
    removed: bool = Field(default=False, description="list removed schedules too")


def _found(request: HttpRequest, ref: str, action: str = "read") -> Schedule:
    """The schedule, when the token may read its team (404 otherwise, as for none) and do
    ``action`` there (403 otherwise)."""
    found = selectors.schedule_named(ref) if queryable(ref) else None
    if found is None:
        raise problems.not_found(f"no schedule {ref[:100]!r}")
    check_reach(request, found, action, f"no schedule {ref[:100]!r}")
    return found


@router.get("/schedules", response={200: list[ScheduleOut], **REFUSALS}, summary="List schedules")
def schedules(request: HttpRequest, q: Query[ScheduleListQuery]) -> list[ScheduleOut]:
    """The live schedules by name (``removed=true``: removed ones too, after them), at most
    500, each with its next tick and last run."""
    require(request, "read")
    refuse_unknown_query(request, ScheduleListQuery)
    rows = scope_runs(selectors.schedules_list(removed=q.removed), reach(request))
    return [ScheduleOut.of(s) for s in rows[:LISTED]]


@router.get(
    "/schedules/{schedule}", response={200: ScheduleOut, **REFUSALS}, summary="Read a schedule"
)
def read(request: HttpRequest, schedule: str) -> ScheduleOut:
    require(request, "read")
    return ScheduleOut.of(_found(request, schedule))


@router.post(
    "/schedules",
    response={201: ScheduleOut, **REFUSALS},
    summary="Add a schedule",
    description="Each tick (of `cron` in `timezone`, or every `interval` seconds) starts one run "
    "of `agent` with `inputs`, whatever the number of beat processes: the tick's idempotency "
    "key is `schedule:<id>:<tick>`. The schedule and its runs are of `team` (default: the "
    "token's team, else the agent's, else the default team; 403 for a team the token may not "
    "operate in). Everything is checked first (422, nothing written); a "
    "live schedule of that name is a 409.",
)
def add(request: HttpRequest, body: ScheduleIn) -> Status[ScheduleOut]:
    token = require(request, "operate")
    team = body.team or token.team or None
    if team is None:
        found = registry.get_agent(body.agent)
        team = (found.team if found is not None else "") or default_team()
    check_team_or_422(team)
    if not token.may("operate", team):
        raise problems.forbidden(f"this token may not add schedules in the team {team!r}")
    try:
        made = transitions.schedule_add(
            name=body.name,
            agent=body.agent,
            inputs=body.inputs,
            cron=body.cron,
            interval=body.interval,
            timezone_name=body.timezone,
            missed=body.missed,
            priority=body.priority,
            concurrency_key=body.concurrency_key,
            concurrency_limit=body.concurrency_limit,
            deadline=body.deadline,
            description=body.description,
            by=actor(token),
            reason=body.reason,
            team=team,
        )
    except OperationError as exc:
        raise problems.refusal(exc) from exc
    return Status(201, ScheduleOut.of(made))


def _change(request: HttpRequest, schedule: str, body: ScheduleChangeIn, change: str) -> Schedule:
    token = require(request, "operate")
    found = _found(request, schedule, "operate")
    try:
        done: Schedule = getattr(transitions, change)(
            schedule_id=found.schedule_id, by=actor(token), reason=body.reason
        )
    except OperationError as exc:
        raise problems.refusal(exc) from exc
    return done


@router.post(
    "/schedules/{schedule}/pause",
    response={200: ScheduleOut, **REFUSALS},
    summary="Pause a schedule",
    description="Its ticks start nothing until it is resumed (409 when paused already).",
)
def pause(request: HttpRequest, schedule: str, body: ScheduleChangeIn) -> ScheduleOut:
    return ScheduleOut.of(_change(request, schedule, body, "schedule_pause"))


@router.post(
    "/schedules/{schedule}/resume",
    response={200: ScheduleOut, **REFUSALS},
    summary="Resume a schedule",
    description="It ticks from now on: the ticks that fell while it was paused start nothing.",
)
def resume(request: HttpRequest, schedule: str, body: ScheduleChangeIn) -> ScheduleOut:
    return ScheduleOut.of(_change(request, schedule, body, "schedule_resume"))


@router.delete(
    "/schedules/{schedule}",
    response={200: ScheduleOut, **REFUSALS},
    summary="Remove a schedule",
    description="It never ticks again; its row stays (its runs name it) and its name is free.",
)
def remove(request: HttpRequest, schedule: str) -> ScheduleOut:
    return ScheduleOut.of(_change(request, schedule, ScheduleChangeIn(), "schedule_remove"))
