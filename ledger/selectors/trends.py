"""Runs over time (the Trends page): what entered each status per hour, the blocked rate, and
p50/p95 duration per agent over a window (24 h, 7 d).

On PostgreSQL read from the hourly rollup the database keeps (``RunTrendHour`` plus the unfolded
``RunTrendDelta``, migration ``0019_run_trends``), never from ``ledger_run``: two statements of
a few hundred rows at any table size. Percentiles come from a histogram on log-spaced edges
(``BUCKET_EDGES``): a p50 of "≤ 25 s" means the run at the median finished in the bucket whose
upper edge is 25 s — at most one bucket (2 to 2.5 times) above the true value. On SQLite (the
one-machine default) the same figures are counted from the runs table, each run once in its
current status.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from ledger.models import Run, RunStatus
from ledger.selectors.runs import scoped

#: Upper edges (seconds) of the duration buckets; bucket ``i`` holds durations in
#: ``[EDGES[i-1], EDGES[i])`` (PostgreSQL's ``width_bucket``), the last one everything longer.
#: Copied into migration 0018: change both, or add a migration that re-buckets.
BUCKET_EDGES: tuple[float, ...] = (
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 150, 300, 600, 1800, 3600, 10800, 21600, 43200,
    86400, 172800, 604800,
)  # fmt: skip

#: A window's span and the width of one bar of its chart.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(hours=6)),
}
#: The statuses a run stops in: the blocked rate is needs_attention's share of them.
STOPS = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION)
#: The finished runs whose duration the percentiles describe (a cancel is a person's choice).
TIMED = (RunStatus.SUCCEEDED, RunStatus.FAILED)
_ORIGIN = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass
class Bin:
    start: datetime
    entered: dict[str, int] = field(default_factory=dict)

    @property
    def stopped(self) -> int:
        return sum(self.entered.get(s, 0) for s in STOPS)


@dataclass
class Percentile:
    """A percentile read from the histogram: the upper edge of its bucket (None: longer than
    the last edge) and the lower edge."""

    upper: float | None
    lower: float


@dataclass
class AgentTrend:
    agent: str
    entered: dict[str, int] = field(default_factory=dict)
    histogram: dict[int, int] = field(default_factory=dict)

    @property
    def stopped(self) -> int:
        return sum(self.entered.get(s, 0) for s in STOPS)

    @property
    def blocked_rate(self) -> float | None:
        stops = self.stopped
        return self.entered.get(RunStatus.NEEDS_ATTENTION, 0) / stops if stops else None

    @property
    def timed(self) -> int:
        return sum(self.histogram.values())

    def percentile(self, q: float) -> Percentile | None:
        return percentile(self.histogram, q)

    @property
    def p50(self) -> Percentile | None:
        return self.percentile(0.50)

    @property
    def p95(self) -> Percentile | None:
        return self.percentile(0.95)


@dataclass
class Trend:
    window: str
    since: datetime
    until: datetime
    step: timedelta
    bins: list[Bin]
    agents: list[AgentTrend]
    total: AgentTrend
    source: str  # "rollup" (PostgreSQL) or "runs" (counted from the runs table)


def percentile(histogram: dict[int, int], q: float) -> Percentile | None:
    """The bucket holding the ``q`` quantile of a histogram {bucket: runs}, or None if empty."""
    total = sum(histogram.values())
    if not total:
        return None
    target, seen = q * total, 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= target:
            break
    lower = BUCKET_EDGES[bucket - 1] if bucket > 0 else 0.0
    upper = BUCKET_EDGES[bucket] if bucket < len(BUCKET_EDGES) else None
    return Percentile(upper=upper, lower=lower)


def bucket_of(seconds: float) -> int:
    """The bucket of a duration, as ``width_bucket`` in migration 0018 computes it."""
    return bisect.bisect_right(BUCKET_EDGES, max(seconds, 0.0))


def _floor(moment: datetime, step: timedelta) -> datetime:
    return _ORIGIN + ((moment - _ORIGIN) // step) * step


# ``{teams}`` is "" (every team) or a condition on the rows' team (migration 0033_trend_team).
_SERIES_SQL = """
SELECT date_bin(%(step)s, hour, %(origin)s) AS bin, status, sum(n) FROM (
    SELECT hour, status, n FROM ledger_runtrendhour
        WHERE hour >= %(since)s AND hour < %(until)s{teams}
    UNION ALL
    SELECT hour, status, n FROM ledger_runtrenddelta
        WHERE hour >= %(since)s AND hour < %(until)s{teams}
) AS kept GROUP BY 1, 2
"""
_AGENTS_SQL = """
SELECT agent, status, bucket, sum(n) FROM (
    SELECT agent, status, bucket, n FROM ledger_runtrendhour
        WHERE hour >= %(since)s AND hour < %(until)s{teams}
    UNION ALL
    SELECT agent, status, bucket, n FROM ledger_runtrenddelta
        WHERE hour >= %(since)s AND hour < %(until)s{teams}
) AS kept GROUP BY 1, 2, 3
"""
_TEAMS = " AND team = ANY(%(teams)s)"

Series = list[tuple[datetime, str, int]]
PerAgent = list[tuple[str, str, int, int]]


def window_bounds(window: str, *, now: datetime) -> tuple[datetime, datetime]:
    """[since, until) of a window (a key of ``WINDOWS``) ending with the bar holding ``now``."""
    span, step = WINDOWS[window]
    until = _floor(now, step) + step
    return until - span, until


def run_trends(*, window: str, now: datetime, teams: Collection[str] | None = None) -> Trend:
    """The figures of one window (a key of ``WINDOWS``) ending with the bar holding ``now``,
    of the runs of ``teams`` (None: every team; the rollup keeps each team's rows apart)."""
    span, step = WINDOWS[window]
    since, until = window_bounds(window, now=now)
    if connection.vendor == "postgresql":
        series, per_agent = _from_rollup(since, until, step, teams)
        source = "rollup"
    else:
        series, per_agent = _from_runs(since, until, step, teams)
        source = "runs"
    bins = {since + i * step: Bin(start=since + i * step) for i in range(span // step)}
    for start, status, n in series:
        if (b := bins.get(start)) is not None:
            b.entered[status] = b.entered.get(status, 0) + n
    agents: dict[str, AgentTrend] = {}
    total = AgentTrend(agent="all agents")
    for agent, status, bucket, n in per_agent:
        row = agents.setdefault(agent, AgentTrend(agent=agent))
        for target in (row, total):
            target.entered[status] = target.entered.get(status, 0) + n
            if status in TIMED and bucket >= 0:
                target.histogram[bucket] = target.histogram.get(bucket, 0) + n
    return Trend(
        window=window,
        since=since,
        until=until,
        step=step,
        bins=list(bins.values()),
        agents=sorted(agents.values(), key=lambda a: (-a.stopped, a.agent)),
        total=total,
        source=source,
    )


def _from_rollup(
    since: datetime, until: datetime, step: timedelta, teams: Collection[str] | None = None
) -> tuple[Series, PerAgent]:
    params: dict[str, Any] = {"since": since, "until": until, "step": step, "origin": _ORIGIN}
    where = ""
    if teams is not None:
        params["teams"] = sorted(teams)
        where = _TEAMS
    with connection.cursor() as cur:
        cur.execute(_SERIES_SQL.format(teams=where), params)
        series = [(b, s, int(n)) for b, s, n in cur.fetchall() if n]
        cur.execute(_AGENTS_SQL.format(teams=where), params)
        per_agent = [(a, s, int(b), int(n)) for a, s, b, n in cur.fetchall() if n]
    return series, per_agent


def _from_runs(
    since: datetime, until: datetime, step: timedelta, teams: Collection[str] | None = None
) -> tuple[Series, PerAgent]:
    runs = scoped(
        Run.objects.filter(status_changed_at__gte=since, status_changed_at__lt=until), teams
    )
    rows: Iterable[tuple[datetime, str, str, datetime, datetime | None]] = (
        runs.order_by().values_list(
            "status_changed_at", "agent", "status", "created_at", "finished_at"
        )
    )
    series: dict[tuple[datetime, str], int] = defaultdict(int)
    per_agent: dict[tuple[str, str, int], int] = defaultdict(int)
    for changed, agent, status, created, finished in rows:
        series[(_floor(changed, step), status)] += 1
        bucket = -1
        if status in (*TIMED, RunStatus.CANCELLED) and finished is not None:
            bucket = bucket_of((finished - created).total_seconds())
        per_agent[(agent, status, bucket)] += 1
    return (
        [(b, s, n) for (b, s), n in series.items()],
        [(a, s, b, n) for (a, s, b), n in per_agent.items()],
    )
