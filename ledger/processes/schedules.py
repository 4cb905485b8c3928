"""The schedules' pass: start the runs of the ticks that are due. Celery beat sends it
(``runledger.schedules``, on the control queue, as often as the sweep); any number of passes
may run at once.

For each live, running schedule whose next tick is due, the policy for missed ticks says which
due ticks start a run (``ledger.schedules.due_ticks``). Each is started through the one start
(``run_start_once``) with the tick's idempotency key ``schedule:<id>:<tick>`` and the schedule
recorded on the run; then the schedule's next tick moves on by compare-and-set
(``schedule_advance``). A second pass that read the same tick starts nothing new (the key
answers the first pass's run) and moves nothing; a pass killed between a start and the advance
(``schedule.after_start``, a fault point) leaves the tick due, and the next pass's start of it
answers the run already made. So each tick has at most one run, whatever the number of beats,
and every tick the policy runs gets its run once a pass completes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from ledger import faultpoints, observe, schedules, transitions
from ledger.conf import conf
from ledger.errors import Conflict, InvalidInput, NotJSON
from ledger.models import Schedule
from ledger.transitions.schedules import schedule_advance

Clock = Callable[[], datetime]
log = logging.getLogger(__name__)


def schedules_tick(*, clock: Clock = timezone.now, limit: int = 100) -> list[str]:
    """One pass; the ids of the runs its ticks started (or found started by an earlier pass)."""
    now = clock()
    due = list(
        Schedule.objects.filter(
            removed_at__isnull=True, paused_at__isnull=True, next_at__lte=now
        ).order_by("next_at")[:limit]
    )
    run_ids: list[str] = []
    for schedule in due:
        run_ids += schedule_fire(schedule, now=now, clock=clock)
    return run_ids


def schedule_fire(schedule: Schedule, *, now: datetime, clock: Clock) -> list[str]:
    """Start the due ticks' runs of one schedule (as read: ``next_at`` due at ``now``), then
    move its next tick on; the runs' ids."""
    spec = schedules.Spec(
        cron=schedule.cron, interval=schedule.interval_seconds, timezone=schedule.timezone
    )
    due = schedules.due_ticks(
        spec,
        next_at=schedule.next_at,
        now=now,
        policy=schedule.missed,
        grace=conf.RUNLEDGER_SCHEDULE_GRACE_SECONDS,
    )
    run_ids: list[str] = []
    errors: list[str] = []
    for tick in due.ticks:
        try:
            started = _start(schedule, tick, clock=clock)
        except (LookupError, InvalidInput, Conflict, NotJSON) as exc:
            # The agent is gone from this process, or refuses the inputs now: the tick is
            # passed over and the schedule's page says why.
            errors.append(f"tick {tick:%Y-%m-%d %H:%M:%S %Z}: {exc}")
            log.warning("schedule %s: tick %s not started: %s", schedule.name, tick, exc)
            continue
        run_ids.append(started)
        # The tick's run is committed, the schedule not yet moved on (a kill test's point).
        faultpoints.point("schedule.after_start")
    moved = schedule_advance(
        schedule_id=schedule.schedule_id,
        seen_next_at=schedule.next_at,
        next_at=due.next_at,
        last_tick_at=due.ticks[-1] if due.ticks else None,
        last_run_id=run_ids[-1] if run_ids else "",
        skipped=due.skipped,
        error="; ".join(errors),
    )
    if moved:
        observe.emit("schedule_tick", schedule=schedule.name, runs=len(run_ids))
    return run_ids


def _start(schedule: Schedule, tick: datetime, *, clock: Clock) -> str:
    started = transitions.run_start_once(
        agent=schedule.agent,
        inputs=schedule.inputs,
        idempotency_key=schedules.tick_key(schedule.schedule_id, tick),
        pace=transitions.Pace(
            concurrency_key=schedule.concurrency_key or None,
            concurrency_limit=schedule.concurrency_limit,
            priority=schedule.priority,
            deadline=schedule.deadline_seconds,
        ),
        schedule=schedule.schedule_id,
        team=schedule.team,
        clock=clock,
    )
    return started.run.run_id
