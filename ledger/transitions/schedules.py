"""Schedules (``ledger.schedules``): a person adds, pauses, resumes and removes one — each one
transaction with its audit row — and the periodic pass moves a schedule's next tick on.

Adding checks everything a tick's run will need before anything is written: the name, the cron
expression or interval, the time zone, the policy for missed ticks, the agent (registered in
this process), the inputs (as a start checks them: what the agent ``requires``, the concurrency
key it makes from them) and the start options (priority, concurrency key and limit, deadline).
A refusal raises ``InvalidInput`` (or ``Conflict``: a live schedule has that name) and writes
nothing.

The pass (``ledger.processes.schedules``) starts each due tick's run through ``run_start_once``
with the tick's idempotency key, then calls ``schedule_advance``: a compare-and-set on the
``next_at`` it read, so a second pass that read the same tick moves nothing, and a pass killed
between the two leaves the tick due — the next pass starts it again, and the key answers the
run already made.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ledger import registry, schedules
from ledger.errors import Conflict, InvalidInput, NotAllowed, NotJSON
from ledger.models import AuditAction, Schedule
from ledger.teams import check_team, default_team
from ledger.transitions._common import Actor, Clock, actor_name, record
from ledger.transitions.lifecycle import Pace, new_run

MAX_DESCRIPTION_CHARS = 200


def schedule_add(
    *,
    name: str,
    agent: str,
    inputs: Any = None,
    cron: str | None = None,
    interval: int | None = None,
    timezone_name: str = "UTC",
    missed: str = "skip",
    priority: int | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    deadline: float | None = None,
    description: str = "",
    by: Actor,
    reason: str = "",
    team: str | None = None,
    clock: Clock = timezone.now,
) -> Schedule:
    """Add a schedule; its first tick is the first after now. Refused, writing nothing:
    ``InvalidInput`` (see the module docstring; an unknown agent too, a team that is not a
    team's slug), ``Conflict`` when a live schedule has that name. ``team``: the team of the
    runs it starts and of the schedule itself (default: the agent's declared team, else
    RUNLEDGER_DEFAULT_TEAM)."""
    who = actor_name(by)
    now = clock()
    spec = schedules.check_spec(cron=cron, interval=interval, timezone=timezone_name)
    if team is not None:
        team = check_team(team)
    else:
        declared = registry.get_agent(agent) if isinstance(agent, str) else None
        team = (declared.team if declared is not None else "") or default_team()
    row = Schedule(
        name=schedules.check_name(name),
        description=_description(description),
        agent=agent,
        team=team,
        inputs=_checked_inputs(
            agent,
            {} if inputs is None else inputs,
            now=now,
            options=Pace(
                concurrency_key=concurrency_key,
                concurrency_limit=concurrency_limit,
                priority=priority,
                deadline=schedules.check_deadline_seconds(deadline),
            ),
        ),
        cron=spec.cron,
        interval_seconds=spec.interval,
        timezone=spec.timezone,
        missed=schedules.check_policy(missed),
        priority=priority,
        concurrency_key=concurrency_key or "",
        concurrency_limit=concurrency_limit,
        deadline_seconds=deadline,
        next_at=spec.next_after(now),
        created_at=now,
        created_by=who,
    )
    try:
        with transaction.atomic():
            row.save(force_insert=True)
            record(
                by=who,
                action=AuditAction.SCHEDULE_ADD,
                at=now,
                after=schedule_snapshot(row),
                reason=reason.strip() or "schedule added",
            )
    except IntegrityError:
        raise Conflict(
            f"a schedule named {name!r} exists; remove it first or choose another name"
        ) from None
    return row


def _checked_inputs(agent: str, inputs: Any, *, now: datetime, options: Pace) -> Any:
    """The inputs in canonical form, checked as a tick's start will check them (an unsaved
    run is made and thrown away)."""
    if not isinstance(agent, str) or registry.get_agent(agent) is None:
        known = ", ".join(sorted(registry.agents())) or "none"
        raise InvalidInput(f"agent: no agent named {agent!r} is registered (registered: {known})")
    try:
        run = _trial_run(agent, inputs, now=now, options=options)
    except NotJSON as exc:
        raise InvalidInput(f"inputs: {exc}") from None
    return run.inputs


def _trial_run(agent: str, inputs: Any, *, now: datetime, options: Pace) -> Any:
    return new_run(
        agent=agent,
        inputs=inputs,
        run_id=None,
        max_resumes=None,
        now=now,
        parent=None,
        parent_kind="",
        forked_from_step_id="",
        idempotency_key=None,
        title=None,
        labels=None,
        pace=options,
    )


def _description(text: Any) -> str:
    if not isinstance(text, str) or len(text) > MAX_DESCRIPTION_CHARS:
        raise InvalidInput(f"description: text of at most {MAX_DESCRIPTION_CHARS} characters")
    return text.strip()


def schedule_pause(
    *, schedule_id: str, by: Actor, reason: str = "", clock: Clock = timezone.now
) -> Schedule:
    """Pause a live schedule: its ticks start nothing until it is resumed."""
    return _change(
        schedule_id,
        by=by,
        reason=reason or "schedule paused",
        action=AuditAction.SCHEDULE_PAUSE,
        clock=clock,
        when=lambda s: "it is paused already" if s.paused_at is not None else "",
        changes=lambda s, now, who: {"paused_at": now, "paused_by": who},
    )


def schedule_resume(
    *, schedule_id: str, by: Actor, reason: str = "", clock: Clock = timezone.now
) -> Schedule:
    """Resume a paused schedule from now: the ticks that fell while it was paused start
    nothing (its next tick is the first after now)."""

    def changes(s: Schedule, now: datetime, who: str) -> dict[str, Any]:
        spec = schedules.Spec(cron=s.cron, interval=s.interval_seconds, timezone=s.timezone)
        return {"paused_at": None, "paused_by": "", "next_at": spec.next_after(now)}

    return _change(
        schedule_id,
        by=by,
        reason=reason or "schedule resumed",
        action=AuditAction.SCHEDULE_RESUME,
        clock=clock,
        when=lambda s: "it is not paused" if s.paused_at is None else "",
        changes=changes,
    )


def schedule_remove(
    *, schedule_id: str, by: Actor, reason: str = "", clock: Clock = timezone.now
) -> Schedule:
    """Remove a schedule: it never ticks again; its row stays (its runs name it) and its name
    is free for a new one."""
    return _change(
        schedule_id,
        by=by,
        reason=reason or "schedule removed",
        action=AuditAction.SCHEDULE_REMOVE,
        clock=clock,
        when=lambda s: "",
        changes=lambda s, now, who: {"removed_at": now, "removed_by": who},
    )


def _change(
    schedule_id: str,
    *,
    by: Actor,
    reason: str,
    action: str,
    clock: Clock,
    when: Any,
    changes: Any,
) -> Schedule:
    """One person's change of a live schedule: locked, checked (``when`` answers why not, or
    ""), written with its audit row in one transaction; ``InvalidInput`` for no such schedule,
    ``NotAllowed`` for a removed one or a change that makes no sense now."""
    who = actor_name(by)
    now = clock()
    with transaction.atomic():
        row = Schedule.objects.select_for_update().filter(pk=schedule_id).first()
        if row is None:
            raise InvalidInput(f"no schedule {schedule_id!r}")
        if row.removed_at is not None:
            raise NotAllowed(f"schedule {row.name} was removed by {row.removed_by}")
        refused = when(row)
        if refused:
            raise NotAllowed(f"schedule {row.name}: {refused}")
        before = schedule_snapshot(row)
        new = changes(row, now, who)
        Schedule.objects.filter(pk=row.pk, removed_at__isnull=True).update(**new)  # locked
        for field, value in new.items():
            setattr(row, field, value)
        record(
            by=who,
            action=action,
            at=now,
            before=before,
            after=schedule_snapshot(row),
            reason=reason.strip()[:4000],
        )
    return row


def schedule_advance(
    *,
    schedule_id: str,
    seen_next_at: datetime,
    next_at: datetime,
    last_tick_at: datetime | None,
    last_run_id: str,
    skipped: int,
    error: str,
) -> bool:
    """Move a schedule's next tick from ``seen_next_at`` (what the pass read) to ``next_at``,
    recording the pass's last tick and run, the ticks it skipped and what it could not start
    ("" clears it). A compare-and-set: False when another pass moved it first (or the
    schedule was removed), and then nothing is written."""
    changes: dict[str, Any] = {"next_at": next_at, "last_error": error[:2000]}
    if last_tick_at is not None:
        changes["last_tick_at"] = last_tick_at
    if last_run_id:
        changes["last_run_id"] = last_run_id
    if skipped:
        changes["ticks_skipped"] = F("ticks_skipped") + skipped
    done = Schedule.objects.filter(
        pk=schedule_id, next_at=seen_next_at, removed_at__isnull=True
    ).update(**changes)
    return done == 1


def schedule_snapshot(s: Schedule) -> dict[str, Any]:
    """A schedule as the audit and ``schedules list --json`` show it."""
    return {
        "schedule_id": s.schedule_id,
        "name": s.name,
        "agent": s.agent,
        "team": s.team,
        "inputs": s.inputs,
        "cron": s.cron,
        "interval": s.interval_seconds or None,
        "timezone": s.timezone,
        "missed": s.missed,
        "priority": s.priority,
        "concurrency_key": s.concurrency_key or None,
        "concurrency_limit": s.concurrency_limit,
        "deadline": s.deadline_seconds,
        "description": s.description,
        "next_at": _iso(s.next_at),
        "paused": s.paused_at is not None,
        "removed": s.removed_at is not None,
        "last_tick_at": _iso(s.last_tick_at),
        "last_run_id": s.last_run_id,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None
