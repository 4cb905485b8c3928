"""Schedules: runs started by a clock — a cron expression in a time zone, or an interval.

::

    runledger schedules add nightly-report --agent report --cron "0 3 * * *" \\
        --timezone Europe/Paris --inputs '{"scope": "eu"}' --missed once

This module holds what a schedule means and no tables: the checked spec (``check_spec``), when
its ticks fall (``Spec.next_after``) and which due ticks start a run under each policy for
missed ticks (``due_ticks``). The rows and their transitions are in ``ledger.transitions``
(``schedules``); the periodic pass that starts the due ticks' runs is
``ledger.processes.schedules``. Imports without Django settings.

- A cron expression has the five fields (minute, hour, day of month, month, day of week) or a
  ``@daily``-style nickname, read by croniter in the schedule's time zone (``zoneinfo``): "0 3 *
  * *" in Europe/Paris is 03:00 Paris time in winter and in summer; a time the clock skips at
  the spring change is run at the first minute after it, one the clock repeats in autumn once.
- An interval of N seconds ticks on the Unix epoch's grid (every 3600 s: each whole hour,
  UTC), so that every process computes the same ticks; the time zone does not move it.

A tick is *on time* when the pass that sees it runs within ``grace`` seconds of it
(``RUNLEDGER_SCHEDULE_GRACE_SECONDS``); the others are *missed* (beat was down, the schedule's
ticks came faster than the pass). Policies for missed ticks:

- ``skip``: a missed tick starts nothing; only an on-time tick starts a run;
- ``once``: the latest due tick starts one run, however late; the older ones start nothing;
- ``each``: every due tick starts its own run, oldest first — at most ``CATCH_UP_MAX`` (100),
  the newest ones; older ticks beyond that start nothing (and are counted as skipped).
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import CroniterBadCronError, croniter

from ledger.errors import InvalidInput

#: The policies for missed ticks.
POLICIES = ("skip", "once", "each")
#: The most runs ``each`` starts for the ticks missed before one pass (the newest ones).
CATCH_UP_MAX = 100
#: The shortest interval; a cron expression's finest step is a minute.
MIN_INTERVAL_SECONDS = 1
#: The longest interval (a year: beyond it a cron expression says what is meant).
MAX_INTERVAL_SECONDS = 366 * 86400
#: A schedule's name: what commands and pages call it.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
_NAME = re.compile(NAME_PATTERN)
#: How far a pass walks through the ticks it missed before it jumps to the newest ones.
_WALK_MAX = 20_000


@dataclass(frozen=True)
class Spec:
    """When a schedule ticks: ``cron`` ('' for an interval) or ``interval`` seconds (0 for a
    cron expression), in ``timezone`` (an IANA name)."""

    cron: str
    interval: int
    timezone: str

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def next_after(self, at: datetime) -> datetime:
        """The first tick strictly after ``at`` (an aware time), in UTC."""
        if self.interval:
            k = math.floor(at.timestamp() / self.interval) + 1
            return datetime.fromtimestamp(k * self.interval, UTC)
        local = at.astimezone(self.zone)
        return croniter(self.cron, local).get_next(datetime).astimezone(UTC)

    def latest_at_or_before(self, at: datetime) -> datetime:
        """The last tick at or before ``at``, in UTC."""
        if self.interval:
            k = math.floor(at.timestamp() / self.interval)
            return datetime.fromtimestamp(k * self.interval, UTC)
        local = (at + timedelta(microseconds=1)).astimezone(self.zone)
        return croniter(self.cron, local).get_prev(datetime).astimezone(UTC)

    def describe(self) -> str:
        if self.interval:
            return f"every {_seconds_text(self.interval)}"
        return f"cron {self.cron} ({self.timezone})"


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            "name: 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if name.startswith("sch_"):
        raise InvalidInput("name: 'sch_' starts a schedule's id; choose a name without it")
    return name


def check_spec(*, cron: Any = None, interval: Any = None, timezone: Any = "UTC") -> Spec:
    """The spec, or ``InvalidInput`` saying what is wrong: exactly one of a cron expression
    (five fields, or a nickname such as ``@daily``) and an interval (whole seconds, 1 to a
    year), and a time zone that ``zoneinfo`` knows (IANA: ``Europe/Paris``, ``UTC``)."""
    zone = check_timezone(timezone)
    has_cron = cron not in (None, "")
    if has_cron == (interval is not None):
        raise InvalidInput("a schedule has a cron expression or an interval (exactly one)")
    if interval is not None:
        if isinstance(interval, bool) or not isinstance(interval, int):
            raise InvalidInput("interval: whole seconds")
        if not MIN_INTERVAL_SECONDS <= interval <= MAX_INTERVAL_SECONDS:
            raise InvalidInput(
                f"interval: {interval} s; from {MIN_INTERVAL_SECONDS} s to a year "
                f"({MAX_INTERVAL_SECONDS} s)"
            )
        return Spec(cron="", interval=interval, timezone=zone)
    return Spec(cron=check_cron(cron), interval=0, timezone=zone)


def check_cron(cron: Any) -> str:
    if not isinstance(cron, str) or len(cron) > 200 or not cron.isprintable():
        raise InvalidInput("cron: an expression of five fields, such as '0 3 * * *'")
    text = " ".join(cron.split())
    fields = text.split(" ")
    nickname = len(fields) == 1 and text.startswith("@")
    if not nickname and len(fields) != 5:
        raise InvalidInput(
            f"cron: {cron!r} has {len(fields)} field(s); five are needed (minute hour "
            "day-of-month month day-of-week), e.g. '*/15 * * * *'"
        )
    try:
        croniter(text, datetime(2026, 1, 1, tzinfo=UTC)).get_next(datetime)
    except (CroniterBadCronError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"cron: {cron!r} is not a cron expression ({exc})") from None
    return text


def check_timezone(timezone: Any) -> str:
    if not isinstance(timezone, str) or not timezone or len(timezone) > 64:
        raise InvalidInput("timezone: an IANA time zone name, such as 'Europe/Paris' or 'UTC'")
    if timezone not in available_timezones() and timezone != "UTC":
        raise InvalidInput(f"timezone: {timezone!r} is not a time zone (IANA: 'Europe/Paris')")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(f"timezone: {timezone!r} is not a time zone") from None
    return timezone


def check_policy(policy: Any) -> str:
    if policy not in POLICIES:
        raise InvalidInput(f"missed: one of {', '.join(POLICIES)}, not {policy!r}")
    return str(policy)


def check_deadline_seconds(seconds: Any) -> float | None:
    """A schedule's deadline: seconds from each tick (more than 0, at most a year), or None."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidInput("deadline: seconds from each tick")
    if not 0 < seconds <= 366 * 86400 or not math.isfinite(seconds):
        raise InvalidInput("deadline: seconds from each tick, more than 0 (at most a year)")
    return float(seconds)


@dataclass(frozen=True)
class Due:
    """What one pass does for a schedule: the ticks that start a run (oldest first), how many
    due ticks start nothing, and the schedule's next tick after the pass."""

    ticks: list[datetime]
    skipped: int
    next_at: datetime


def due_ticks(spec: Spec, *, next_at: datetime, now: datetime, policy: str, grace: float) -> Due:
    """The ticks from ``next_at`` (the schedule's next tick, due) to ``now`` and what the
    policy makes of them (see the module docstring)."""
    newest: deque[datetime] = deque(maxlen=CATCH_UP_MAX)
    count, tick = 0, next_at
    while tick <= now and count < _WALK_MAX:
        newest.append(tick)
        count += 1
        tick = spec.next_after(tick)
    if tick <= now:  # a long outage: jump to the newest ticks instead of walking them all
        latest = spec.latest_at_or_before(now)
        count += _count_between(spec, tick, latest)
        newest = _newest_until(spec, latest, CATCH_UP_MAX)
        tick = spec.next_after(now)
    if not newest:
        return Due([], 0, spec.next_after(now) if next_at <= now else next_at)
    latest = newest[-1]
    if policy == "each":
        chosen = list(newest)
    elif policy == "once" or now - latest <= timedelta(seconds=grace):
        chosen = [latest]
    else:
        chosen = []
    return Due(chosen, count - len(chosen), tick)


def _newest_until(spec: Spec, latest: datetime, n: int) -> deque[datetime]:
    out: deque[datetime] = deque(maxlen=n)
    tick = latest
    for _ in range(n):
        out.appendleft(tick)
        tick = spec.latest_at_or_before(tick - timedelta(microseconds=1))
    return out


def _count_between(spec: Spec, first: datetime, last: datetime) -> int:
    """How many ticks from ``first`` to ``last`` (estimated for cron: only a count shown)."""
    if spec.interval:
        return int((last - first).total_seconds() // spec.interval) + 1
    step = (spec.next_after(first) - first).total_seconds() or 60
    return int((last - first).total_seconds() // step) + 1


def tick_key(schedule_id: str, tick: datetime) -> str:
    """The idempotency key of a tick's run: every pass that sees the tick (a second beat, a
    restarted one) starts it with this key, so the tick has one run."""
    return f"schedule:{schedule_id}:{tick.astimezone(UTC).isoformat()}"


def _seconds_text(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
