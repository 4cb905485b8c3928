"""Rate limits held by PostgreSQL (``ledger.ratelimits``): the slots of each limit key, taken
by every worker's calls with one statement.

Why a slot row (the generic cell rate algorithm) rather than a sliding window of past calls:
one row per key, updated in place by one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``,
costs the same whatever the rate (a window table grows with every call and needs a count and a
clean-up), and it *reserves*: a call that must wait gets its own slot at once, after every
slot taken before it, so calls go in the order they asked — first come, first served between
runs, whichever worker they are on — and none is starved by a faster neighbour polling. Slots
are ``interval = period / count`` apart and never bunched: at most ``count`` calls in any
window of one period.

A slot taken and then not used (its worker died, its run was cancelled) is lost: the limit is
under-used for one interval, never exceeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest

from ledger.models import RateHold, RateLimit
from ledger.ratelimits import Take

Clock = Callable[[], datetime]

_TAKE = """
INSERT INTO ledger_ratelimit
       (key, next_at, blocked_until, rate, "interval", taken, waited, blocked, updated_at)
VALUES (%(key)s, %(now)s + %(step)s * interval '1 second', NULL, %(rate)s, %(interval)s, 1, 0, 0,
        %(now)s)
ON CONFLICT (key) DO UPDATE SET
       next_at = GREATEST(ledger_ratelimit.next_at, %(now)s,
                          COALESCE(ledger_ratelimit.blocked_until, %(now)s))
                 + %(step)s * interval '1 second',
       rate = EXCLUDED.rate, "interval" = EXCLUDED."interval",
       taken = ledger_ratelimit.taken + 1,
       waited = ledger_ratelimit.waited
                + (GREATEST(ledger_ratelimit.next_at,
                            COALESCE(ledger_ratelimit.blocked_until, %(now)s)) > %(now)s)::int,
       updated_at = %(now)s
RETURNING next_at"""


def rate_take(*, take: Take, now: datetime, cost: float = 1.0) -> datetime:
    """Take the next slot of ``take``'s key for a call of ``cost`` (1 for a request; 0 for a
    model's tokens, which are paid after the call by ``rate_charge``): when the call may go,
    at or after ``now``. One statement on PostgreSQL."""
    step = take.rate.interval * cost
    if connection.vendor == "postgresql":
        params: dict[str, Any] = {
            "key": take.row,
            "now": now,
            "step": step,
            "rate": take.rate.text[:40],
            "interval": take.rate.interval,
        }
        with connection.cursor() as cursor:
            cursor.execute(_TAKE, params)
            (next_at,) = cursor.fetchone()
        return next_at - timedelta(seconds=step)  # type: ignore[no-any-return]
    return _take_elsewhere(take=take, now=now, step=step)


def _take_elsewhere(*, take: Take, now: datetime, step: float) -> datetime:
    """The same on SQLite (the demo: one writer serializes anyway)."""
    with transaction.atomic():
        row, _ = RateLimit.objects.select_for_update().get_or_create(
            key=take.row, defaults={"next_at": now, "updated_at": now}
        )
        slot = max(row.next_at, now, row.blocked_until or now)
        RateLimit.objects.filter(pk=take.row).update(
            next_at=slot + timedelta(seconds=step),
            rate=take.rate.text[:40],
            interval=take.rate.interval,
            taken=F("taken") + 1,
            waited=F("waited") + (1 if slot > now else 0),
            updated_at=now,
        )
    return slot


def rate_charge(*, take: Take, tokens: int, now: datetime) -> None:
    """A model call used ``tokens``: the key's next slot moves that many per-token intervals
    on (paid after the call, as the count is known only then)."""
    if tokens <= 0:
        return
    step = timedelta(seconds=take.rate.interval * tokens)
    RateLimit.objects.filter(pk=take.row).update(
        next_at=Greatest(F("next_at"), Value(now)) + step, updated_at=now
    )


def rate_block(*, keys: Iterable[str], until: datetime, now: datetime) -> int:
    """A provider answered 429 with retry-after: no slot of these keys before ``until``, for
    every worker (the slots already taken are checked again by their callers before they
    send). The number of keys blocked."""
    done = 0
    for key in keys:
        done += RateLimit.objects.filter(pk=key).update(
            blocked_until=Greatest(Coalesce(F("blocked_until"), Value(until)), Value(until)),
            next_at=Greatest(F("next_at"), Value(until)),
            blocked=F("blocked") + 1,
            updated_at=now,
        )
    return done


def rate_blocked_until(*, keys: Iterable[str], now: datetime) -> datetime | None:
    """The latest block among ``keys`` still in force at ``now`` (None: none)."""
    found = (
        RateLimit.objects.filter(pk__in=list(keys), blocked_until__gt=now)
        .order_by("-blocked_until")
        .values_list("blocked_until", flat=True)
        .first()
    )
    return found


def rate_hold(*, run_id: str, step_id: str, slots: dict[str, datetime]) -> None:
    """Keep the slots a run released to wait for (``RateHold``), for its next execution."""
    with transaction.atomic():
        for key, slot_at in slots.items():
            RateHold.objects.update_or_create(
                run_id=run_id, step_id=step_id, key=key, defaults={"slot_at": slot_at}
            )


def rate_holds_take(*, run_id: str, step_id: str) -> dict[str, datetime]:
    """The slots this run kept for ``step_id`` when it was released, taken (deleted) now."""
    holds = RateHold.objects.filter(run_id=run_id, step_id=step_id)
    found = dict(holds.values_list("key", "slot_at"))
    if found:
        holds.delete()
    return found


def rate_holds_of(*, run_id: str) -> dict[str, set[str]]:
    """The steps of ``run_id`` with kept slots, and their keys (one query)."""
    found: dict[str, set[str]] = {}
    for step_id, key in RateHold.objects.filter(run_id=run_id).values_list("step_id", "key"):
        found.setdefault(step_id, set()).add(key)
    return found
