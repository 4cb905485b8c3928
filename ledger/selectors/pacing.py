"""What the pacing page and the metrics read: per concurrency key, the runs running and held
back; per rate limit, its slots, the calls waiting for one and the runs released to wait.

Bounded: the keys with the most held-back runs first, at most ``limit`` of them (the rest are
summed by the callers that need a total), so a fleet with a million customer keys costs one
grouped query over the partial index of keyed runs, never a million rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Min, Q

from ledger import ratelimits, registry
from ledger.conf import conf
from ledger.models import RateHold, RateLimit, Run, RunStatus


@dataclass(frozen=True)
class KeyLoad:
    """One concurrency key: its limit, the runs running and the runs held back."""

    key: str
    limit: int
    running: int
    queued: int
    oldest_queued: datetime | None


def concurrency_keys(*, limit: int = 50) -> tuple[list[KeyLoad], KeyLoad]:
    """The busiest keys (most held back, then most running), at most ``limit``; and the
    totals of the others (``key`` ``(other)``)."""
    rows = (
        Run.objects.exclude(concurrency_key="")
        .filter(status__in=[RunStatus.RUNNING, RunStatus.QUEUED])
        .values("concurrency_key")
        .annotate(
            running=Count("pk", filter=Q(status=RunStatus.RUNNING)),
            queued=Count("pk", filter=Q(status=RunStatus.QUEUED)),
            top=Max("concurrency_limit"),
            oldest=Min("created_at", filter=Q(status=RunStatus.QUEUED)),
        )
        .order_by("-queued", "-running", "concurrency_key")
    )
    shown, running, queued = [], 0, 0
    for i, row in enumerate(rows.iterator()):
        if i < limit:
            shown.append(
                KeyLoad(
                    key=row["concurrency_key"],
                    limit=row["top"] or 1,
                    running=row["running"],
                    queued=row["queued"],
                    oldest_queued=row["oldest"],
                )
            )
        else:
            running += row["running"]
            queued += row["queued"]
    return shown, KeyLoad("(other)", 0, running, queued, None)


@dataclass
class LimitLoad:
    """One rate limit: what is configured, where its slots stand, who waits for them."""

    key: str
    budget: str  # requests | tokens
    rate: str
    source: str  # setting | tool | seen (a row whose configuration is gone)
    next_in: float = 0.0  # seconds until the next free slot (0: free now)
    calls_waiting: int = 0  # slots already taken beyond now: calls waiting for them
    runs_released: list[str] = field(default_factory=list)  # released runs keeping a slot
    released: int = 0
    blocked_for: float = 0.0  # seconds a provider's 429 still blocks it
    taken: int = 0
    waited: int = 0
    blocked: int = 0


def rate_limits(*, now: datetime, runs_shown: int = 5) -> list[LimitLoad]:
    """Every rate limit configured or declared, and every limiter row, by key."""
    found: dict[str, LimitLoad] = {}
    for key, limits in ratelimits.configured_cached(conf.RUNLEDGER_RATE_LIMITS).items():
        for budget in ("requests", "tokens"):
            rate = getattr(limits, budget)
            if rate is not None:
                row = key if budget == "requests" else f"{key}#tokens"
                found[row] = LimitLoad(key, budget, rate.text, "setting")
    for tool in registry.tools().values():
        row = f"tool:{tool.name}"
        if tool.rate_limit is not None and row not in found:
            found[row] = LimitLoad(row, "requests", tool.rate_limit.text, "tool")
    for limit in RateLimit.objects.all()[:1000]:
        key, _, budget = limit.key.partition("#")
        load = found.setdefault(limit.key, LimitLoad(key, budget or "requests", limit.rate, "seen"))
        ahead = (limit.next_at - now).total_seconds()
        load.next_in = max(0.0, ahead)
        if load.budget == "requests" and ahead > 0 and limit.interval > 0:
            load.calls_waiting = math.ceil(ahead / limit.interval)
        if limit.blocked_until is not None and limit.blocked_until > now:
            load.blocked_for = (limit.blocked_until - now).total_seconds()
        load.taken, load.waited, load.blocked = limit.taken, limit.waited, limit.blocked
    held = (
        RateHold.objects.filter(run__status=RunStatus.QUEUED)
        .values("key")
        .annotate(n=Count("run", distinct=True))
        .order_by()
    )
    for hold in held:
        if hold["key"] in found:
            found[hold["key"]].released = hold["n"]
    for key, load in found.items():
        if load.released:
            load.runs_released = list(
                RateHold.objects.filter(key=key, run__status=RunStatus.QUEUED)
                .order_by("slot_at")
                .values_list("run_id", flat=True)[:runs_shown]
            )
    return [found[k] for k in sorted(found)]
