"""What the runs list, the run page and the sweep read. Each returns rows or querysets ready to
render.

The list pages by keyset (the last row's sort key), never by OFFSET: the cost of a page does not
grow with the number of rows that precede it. On PostgreSQL the counts per status read the
totals that ``ledger_run``'s triggers keep (``RunStatusCount`` plus the unfolded
``RunStatusDelta`` rows, migration ``0016_status_counts``): exact, and the same cost at any
table size; elsewhere one GROUP BY. Expired leases are one range count on the lease-expiry
index (running runs only).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet, TextField
from django.db.models.functions import Cast, Left
from django.utils.dateparse import parse_datetime

from ledger.conf import conf
from ledger.inputs import queryable
from ledger.models import (
    AuditEvent,
    Beacon,
    Reason,
    Run,
    RunStatus,
    Settlement,
    Step,
    StepStatus,
)
from ledger.selectors.handover import taken_condition

LEASE_EXPIRED = "lease_expired"  # a list filter: running, but the worker's lease ran out
ORDERS = ("newest", "oldest")
RESULT_HEAD_CHARS = 240

# Columns a list row never shows: kept out of the page query, they can be large.
_LIST_DEFERRED = ("inputs", "result", "error", "detail")


# --- counts --------------------------------------------------------------------------------


@dataclass
class StatusCounts:
    by_status: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    lease_expired: int = 0
    sweep: SweepHealth | None = None

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


def run_status_counts(*, now: datetime) -> StatusCounts:
    """Runs per status, blocked runs per reason, and running runs whose lease has expired."""
    counts = StatusCounts(
        by_status={s: 0 for s in RunStatus.values},
        by_reason={r: 0 for r in Reason.values if r},
    )
    for status, reason, n in _counts_by_status_reason():
        counts.by_status[status] = counts.by_status.get(status, 0) + n
        if status == RunStatus.NEEDS_ATTENTION:
            key = reason or "unknown"
            counts.by_reason[key] = counts.by_reason.get(key, 0) + n
    counts.by_status = {s: n for s, n in counts.by_status.items() if n or s in RunStatus.values}
    counts.lease_expired = Run.objects.filter(
        status=RunStatus.RUNNING, lease_expires_at__lt=now
    ).count()
    counts.sweep = sweep_health(now=now)
    return counts


_COUNTS_SQL = """
SELECT status, reason, sum(n) FROM (
    SELECT status, reason, n FROM ledger_runstatuscount
    UNION ALL
    SELECT status, reason, n FROM ledger_runstatusdelta
) AS kept GROUP BY status, reason
"""


def _counts_by_status_reason() -> list[tuple[str, str, int]]:
    """(status, reason, runs) for every pair with runs, in one statement (one snapshot)."""
    if connection.vendor != "postgresql":
        rows = Run.objects.order_by().values_list("status", "reason").annotate(n=Count("*"))
        return [(status, reason, n) for status, reason, n in rows]
    with connection.cursor() as cur:
        cur.execute(_COUNTS_SQL)
        return [(status, reason, int(n)) for status, reason, n in cur.fetchall() if n]


@dataclass(frozen=True)
class SweepHealth:
    """Whether the recovery sweep (Celery beat) is alive: without it crashed runs wait."""

    last: datetime | None
    minutes_ago: int | None
    ok: bool
    every_seconds: float


def sweep_health(*, now: datetime) -> SweepHealth:
    every = float(conf.RUNLEDGER_SWEEP_SECONDS)
    beacon = Beacon.objects.filter(name="sweep").first()
    if beacon is None:
        return SweepHealth(last=None, minutes_ago=None, ok=False, every_seconds=every)
    age = max((now - beacon.at).total_seconds(), 0.0)
    # Late by three intervals and a minute: the dashboard's own clock moves by whole minutes.
    return SweepHealth(
        last=beacon.at, minutes_ago=int(age // 60), ok=age <= 3 * every + 60, every_seconds=every
    )


# --- the runs list -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFilter:
    status: str = ""
    reason: str = ""
    agent: str = ""
    older_than: timedelta | None = None
    search: str = ""
    order: str = "newest"
    # Who is on it (``selectors.handover``): "mine" (runs ``taker`` is on) or "nobody".
    taken: str = ""
    taker: str = ""


@dataclass(frozen=True)
class Cursor:
    """The sort key of the last row shown: the next page starts strictly after it."""

    at: datetime
    run_id: str

    def encode(self) -> str:
        raw = f"{self.at.isoformat()}|{self.run_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """Raises ValueError for anything that is not a cursor this module wrote."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            stamp, run_id = raw.split("|", 1)
            at = parse_datetime(stamp)
            # The database compares in UTC; a stamp at the calendar's edge has no UTC form.
            at = at.astimezone(UTC) if at is not None and at.tzinfo is not None else None
        except (ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise ValueError("not a page cursor") from exc
        if at is None or not run_id or not queryable(run_id):
            raise ValueError("not a page cursor")  # a NUL byte would reach the query
        return cls(at=at, run_id=run_id)


@dataclass
class RunPage:
    runs: list[Run]
    next_cursor: Cursor | None


def runs_filtered(*, flt: RunFilter, now: datetime) -> QuerySet[Run]:
    """Runs matching a filter, without the large columns; unordered."""
    qs = Run.objects.defer(*_LIST_DEFERRED)
    if flt.status == LEASE_EXPIRED:
        qs = qs.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    elif flt.status:
        qs = qs.filter(status=flt.status)
    if flt.reason:
        qs = qs.filter(reason=flt.reason)
    if flt.agent:
        qs = qs.filter(agent=flt.agent)
    if flt.older_than is not None:
        cutoff = now - flt.older_than
        # A run is created before its status changes, so the second condition adds no
        # filtering; it lets the newest-first scan start at the cutoff instead of the top.
        qs = qs.filter(status_changed_at__lte=cutoff, created_at__lte=cutoff)
    if flt.search:
        qs = qs.filter(search_condition(flt.search))
    if flt.taken:
        qs = qs.filter(taken_condition(flt.taken, who=flt.taker))
    return qs


def search_condition(text: str) -> Q:
    """What the list's search box means, each case served by an index on PostgreSQL:

    - ``run_…``: a run id prefix (a range scan of the primary key: an id that starts with the
      prefix sorts at or after it);
    - ``key:value`` (no spaces): a label, exactly (GIN index on ``labels``);
    - anything else: part of the title, any case (trigram index on ``UPPER(title)``).
    """
    text = text.strip()
    if text.startswith("run_"):
        return Q(run_id__startswith=text, run_id__gte=text)
    key, colon, value = text.partition(":")
    if colon and key and value and " " not in text:
        if connection.vendor == "postgresql":
            return Q(labels__contains={key: value})
        return Q(labels__has_key=key) & Q(**{f"labels__{key}": value})  # no containment here
    return Q(title__icontains=text)


def runs_page(
    *, flt: RunFilter, now: datetime, after: Cursor | None = None, limit: int = 50
) -> RunPage:
    """One page of the list in the filter's order, starting after ``after``.

    ``newest`` orders by creation, newest first; ``oldest`` by time in the current state,
    longest first (with a status of needs_attention: the oldest-blocked first).
    """
    qs = runs_filtered(flt=flt, now=now)
    if flt.order == "oldest":
        qs = qs.order_by("status_changed_at", "run_id")
        if after is not None:
            # The first condition bounds the index range; the second breaks ties by id.
            qs = qs.filter(status_changed_at__gte=after.at).filter(
                Q(status_changed_at__gt=after.at) | Q(run_id__gt=after.run_id)
            )
    else:
        qs = qs.order_by("-created_at", "-run_id")
        if after is not None:
            qs = qs.filter(created_at__lte=after.at).filter(
                Q(created_at__lt=after.at) | Q(run_id__lt=after.run_id)
            )
    rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = None
    if more and rows:
        last = rows[-1]
        at = last.status_changed_at if flt.order == "oldest" else last.created_at
        cursor = Cursor(at=at, run_id=last.run_id)
    return RunPage(runs=rows, next_cursor=cursor)


# --- one run -------------------------------------------------------------------------------


def run_detail(*, run_id: str) -> Run:
    """The run with its parent; raises Run.DoesNotExist."""
    return Run.objects.select_related("parent").get(pk=run_id)


@dataclass(frozen=True)
class Progress:
    """How far a running run has got: its recorded steps and the row written last."""

    count: int
    last: Step | None


def run_progress(*, run_id: str) -> Progress:
    """Two index reads: the run's step count and its most recently written row."""
    rows = Step.objects.filter(run_id=run_id)
    last = (
        rows.only("run_id", "step_id", "status", "kind", "updated_at", "started_at")
        .order_by("-updated_at", "-id")
        .first()
    )
    return Progress(count=rows.count(), last=last)


def effects_of_run(*, run_id: str, limit: int = 50) -> list[Step]:
    """The run's effect rows that were sent or may have been (succeeded, started), in order:
    what a clean run would do again under its own keys."""
    return list(
        Step.objects.filter(
            run_id=run_id,
            kind="effect",
            status__in=(StepStatus.SUCCEEDED, StepStatus.STARTED),
        )
        .only("run_id", "step_id", "status", "effect_key", "tool", "seq")
        .order_by("seq")[:limit]
    )


@dataclass(frozen=True)
class SentAgain:
    """An effect a fork or a clean run would send again under a key of its own."""

    step_id: str
    tool: str
    old_key: str
    old_status: str  # succeeded (it was sent) or started (it may have been)

    def as_audit(self) -> dict[str, str]:
        return {
            "step_id": self.step_id,
            "tool": self.tool,
            "old_key": self.old_key,
            "old_status": self.old_status,
        }


def effects_sent_again(*, run_id: str, kept: frozenset[str] = frozenset()) -> list[SentAgain]:
    """The run's effects that were sent or may have been (succeeded, started) and that a new
    run copying only the rows ``kept`` would send again under new keys (a fork keeps its path
    up to the fork point; a clean run keeps nothing), in the order they first executed."""
    rows = (
        Step.objects.filter(
            run_id=run_id,
            kind="effect",
            status__in=(StepStatus.SUCCEEDED, StepStatus.STARTED),
        )
        .order_by("seq")
        .values_list("step_id", "tool", "effect_key", "status")
    )
    return [
        SentAgain(step_id=step_id, tool=tool, old_key=key or "", old_status=status)
        for step_id, tool, key, status in rows
        if step_id not in kept
    ]


def fork_kept(*, run_id: str, step_id: str) -> frozenset[str]:
    """The step ids a fork after ``step_id`` copies: the recorded path up to and including it
    (empty when the step is not on the path; the fork is refused then)."""
    chain = step_chain(run_id=run_id)
    position = chain.index_of.get(step_id)
    if position is None or position >= chain.on_chain:
        return frozenset()
    return frozenset(s for s, i in chain.index_of.items() if i <= position)


def run_children(*, run_id: str, limit: int = 20) -> list[Run]:
    """Forks and continuations of a run, oldest first (at most ``limit`` + 1, to show 'more')."""
    return list(
        Run.objects.filter(parent_id=run_id)
        .only("run_id", "parent_kind", "status", "reason", "created_at", "parent_id")
        .order_by("created_at", "run_id")[: limit + 1]
    )


@dataclass
class Chain:
    """A run's steps in execution order: the next_step_id chain, then rows off it by seq."""

    pks: list[int]
    on_chain: int
    index_of: dict[str, int]


def step_chain(*, run_id: str) -> Chain:
    """Order a run's steps by following next_step_id from the first live step.

    One query over four narrow columns; rows the chain does not reach (abandoned rows, the
    effects of a replanned branch) follow in the order they first executed.
    """
    rows = list(
        Step.objects.filter(run_id=run_id)
        .order_by("seq")
        .values_list("pk", "step_id", "next_step_id", "status")
    )
    by_id = {step_id: (pk, nxt) for pk, step_id, nxt, _status in rows}
    live = [r for r in rows if r[3] != StepStatus.ABANDONED]
    order: list[int] = []
    seen: set[str] = set()
    current = live[0][1] if live else None
    while current is not None and current in by_id and current not in seen:
        seen.add(current)
        pk, current = by_id[current]
        order.append(pk)
    on_chain = len(order)
    order.extend(pk for pk, step_id, _n, _s in rows if step_id not in seen)
    pk_index = {pk: i for i, pk in enumerate(order)}
    return Chain(
        pks=order,
        on_chain=on_chain,
        index_of={step_id: pk_index[pk] for pk, step_id, _n, _s in rows},
    )


def steps_for_page(*, run_id: str, pks: list[int]) -> list[Step]:
    """The given steps of a run in the given order, with a head of each result, not all of it."""
    head = Left(Cast("result", output_field=TextField()), RESULT_HEAD_CHARS + 1)
    rows = (
        Step.objects.filter(run_id=run_id, pk__in=pks)
        .defer("result", "inputs")
        .annotate(result_head=head)
    )
    by_pk = {s.pk: s for s in rows}
    return [by_pk[pk] for pk in pks if pk in by_pk]


def steps_after(*, run_id: str, after_seq: int = 0, limit: int = 100) -> list[Step]:
    """Up to ``limit`` steps of a run in the order they first executed, after ``after_seq``
    (keyset on the (run, seq) index)."""
    return list(Step.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit])


def step_of_run(*, run_id: str, pk: int) -> Step:
    """One step with everything; raises Step.DoesNotExist when it is not this run's."""
    return Step.objects.get(run_id=run_id, pk=pk)


def ledger_export(*, run_id: str, chunk: int = 500) -> Iterator[dict[str, Any]]:
    """Every step of a run as a dict, by seq, fetched ``chunk`` rows at a time (keyset).

    Memory stays at one chunk however long the run is.
    """
    qs = Step.objects.filter(run_id=run_id).order_by("seq", "pk")
    rows: list[dict[str, Any]] = [dict(r) for r in qs.values()[:chunk]]
    while rows:
        yield from rows
        if len(rows) < chunk:
            return
        seq, pk = rows[-1]["seq"], rows[-1]["id"]
        after = qs.filter(seq__gte=seq).filter(Q(seq__gt=seq) | Q(pk__gt=pk))
        rows = [dict(r) for r in after.values()[:chunk]]


# --- the operator pages ---------------------------------------------------------------------


def settlement_detail(*, pk: int) -> Settlement:
    """One settlement with its run and step; raises Settlement.DoesNotExist."""
    return Settlement.objects.select_related("run", "step_row").get(pk=pk)


def audit_page(
    *, events: QuerySet[AuditEvent], before: tuple[datetime, int] | None, limit: int
) -> tuple[list[AuditEvent], tuple[datetime, int] | None]:
    """One keyset page of an audit queryset ordered newest first (``-at, -id``): the rows
    strictly older than ``before`` and the cursor of the next page (None on the last)."""
    if before is not None:
        at, pk = before
        events = events.filter(at__lte=at).filter(Q(at__lt=at) | Q(pk__lt=pk))
    rows = list(events[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1].at, rows[-1].pk) if more and rows else None)


def steps_by_id(*, run_id: str, step_ids: list[str]) -> dict[str, Step]:
    """Some steps of a run by step id (without their large columns)."""
    rows = Step.objects.filter(run_id=run_id, step_id__in=step_ids).defer("result", "inputs")
    return {s.step_id: s for s in rows}


# --- recovery: what the sweep looks for ----------------------------------------------------


@dataclass(frozen=True)
class ExpiredLease:
    """A running run whose worker stopped renewing its lease, as the sweep saw it."""

    run_id: str
    token: str | None
    owner: str
    expires_at: datetime | None


def runs_with_expired_leases(*, now: datetime, limit: int = 100) -> list[ExpiredLease]:
    """Running runs whose lease ran out: the worker died, froze, or lost its machine."""
    rows = (
        Run.objects.filter(status=RunStatus.RUNNING)
        .filter(Q(lease_expires_at__lt=now) | Q(lease_token__isnull=True))
        .order_by("lease_expires_at")
        .values_list("run_id", "lease_token", "lease_owner", "lease_expires_at")[:limit]
    )
    return [ExpiredLease(*row) for row in rows]


def runs_lost_in_queue(
    *, older_than: float, now: datetime, limit: int = 100
) -> list[tuple[str, datetime]]:
    """Queued runs untouched for ``older_than`` seconds: their message was lost on the way. A
    run waiting out a retry's back-off counts from its ``wake_at`` (its countdown message is
    due then), not from when it was released."""
    cutoff = now - timedelta(seconds=older_than)
    rows = (
        Run.objects.filter(status=RunStatus.QUEUED, updated_at__lt=cutoff)
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lt=cutoff))
        .order_by("updated_at")
        .values_list("run_id", "updated_at")[:limit]
    )
    return list(rows)
