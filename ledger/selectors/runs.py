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
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from django.db import connection
from django.db.models import BooleanField, Count, F, Q, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Left
from django.utils.dateparse import parse_datetime

from ledger.conf import conf
from ledger.inputs import queryable
from ledger.models import (
    AuditEvent,
    Beacon,
    Run,
    RunStatus,
    Settlement,
    Step,
    StepStatus,
)
from ledger.selectors.handover import taken_condition
from ledger.selectors.story import inputs_head_annotations
from ledger.states import ATTENTION_REASONS

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


def run_status_counts(*, now: datetime, teams: Collection[str] | None = None) -> StatusCounts:
    """Runs per status, blocked runs per reason, and running runs whose lease has expired.

    Every team (``teams`` None): the kept totals (``ledger_runstatuscount`` and its deltas),
    whatever the ledger's size. Some teams: counted from ``ledger_run`` on the index
    ``run_team_status`` (team, status, …), exact for those teams and nothing else."""
    counts = StatusCounts(
        by_status={s: 0 for s in RunStatus.values},
        by_reason=dict.fromkeys(ATTENTION_REASONS, 0),
    )
    if teams is not None:
        rows = _team_counts(teams)
        counts.lease_expired = Run.objects.filter(
            team__in=list(teams), status=RunStatus.RUNNING, lease_expires_at__lt=now
        ).count()
        beacon = Beacon.objects.filter(name="sweep").first()
        beacon_at = beacon.at if beacon is not None else None
    elif connection.vendor == "postgresql":
        rows, counts.lease_expired, beacon_at = _kept_counts(now)
    else:
        rows = _counts_by_status_reason()
        counts.lease_expired = Run.objects.filter(
            status=RunStatus.RUNNING, lease_expires_at__lt=now
        ).count()
        beacon = Beacon.objects.filter(name="sweep").first()
        beacon_at = beacon.at if beacon is not None else None
    for status, reason, n in rows:
        counts.by_status[status] = counts.by_status.get(status, 0) + n
        if status == RunStatus.NEEDS_ATTENTION:
            key = reason or "unknown"
            counts.by_reason[key] = counts.by_reason.get(key, 0) + n
    counts.by_status = {s: n for s, n in counts.by_status.items() if n or s in RunStatus.values}
    counts.sweep = _sweep_health(beacon_at, now=now)
    return counts


# The kept totals, the expired leases (a range of the lease-expiry index) and the sweep's
# beacon in one statement: one round trip, one snapshot.
_KEPT_COUNTS_SQL = """
SELECT 'count', status, reason, sum(n)::bigint, NULL::timestamptz FROM (
    SELECT status, reason, n FROM ledger_runstatuscount
    UNION ALL
    SELECT status, reason, n FROM ledger_runstatusdelta
) AS kept GROUP BY status, reason
UNION ALL
SELECT 'lease', '', '', count(*), NULL FROM ledger_run
 WHERE status = 'running' AND lease_expires_at < %s
UNION ALL
SELECT 'beacon', '', '', 0, at FROM ledger_beacon WHERE name = 'sweep'
"""


def _kept_counts(now: datetime) -> tuple[list[tuple[str, str, int]], int, datetime | None]:
    rows: list[tuple[str, str, int]] = []
    expired, beacon_at = 0, None
    with connection.cursor() as cur:
        cur.execute(_KEPT_COUNTS_SQL, [now])
        for kind, status, reason, n, at in cur.fetchall():
            if kind == "count" and n:
                rows.append((status, reason, int(n)))
            elif kind == "lease":
                expired = int(n)
            elif kind == "beacon":
                beacon_at = at
    return rows, expired, beacon_at


_COUNTS_SQL = """
SELECT status, reason, sum(n) FROM (
    SELECT status, reason, n FROM ledger_runstatuscount
    UNION ALL
    SELECT status, reason, n FROM ledger_runstatusdelta
) AS kept GROUP BY status, reason
"""


def _team_counts(teams: Collection[str]) -> list[tuple[str, str, int]]:
    """(status, reason, runs) of the runs of ``teams``: one GROUP BY on ``run_team_status``."""
    if not teams:
        return []
    rows = (
        Run.objects.filter(team__in=list(teams))
        .order_by()
        .values_list("status", "reason")
        .annotate(n=Count("*"))
    )
    return [(status, reason, n) for status, reason, n in rows]


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
    beacon = Beacon.objects.filter(name="sweep").first()
    return _sweep_health(beacon.at if beacon is not None else None, now=now)


def _sweep_health(at: datetime | None, *, now: datetime) -> SweepHealth:
    every = float(conf.RUNLEDGER_SWEEP_SECONDS)
    late = 3 * every + 60  # three intervals and a minute: the page's clock moves by minutes
    if at is None:
        # Never run: overdue only once the ledger's first run has waited that long for it. A
        # fresh start (beat's first pass is a few seconds away) or an empty ledger is no alarm.
        first = Run.objects.order_by("created_at").values_list("created_at", flat=True).first()
        overdue = first is not None and (now - first).total_seconds() > late
        return SweepHealth(last=None, minutes_ago=None, ok=not overdue, every_seconds=every)
    age = max((now - at).total_seconds(), 0.0)
    return SweepHealth(last=at, minutes_ago=int(age // 60), ok=age <= late, every_seconds=every)


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
    # The runs a schedule's ticks started (its id, ``sch_…``).
    schedule: str = ""
    # One team's runs (the list's ``?team=``), "" for every team the reader may see.
    team: str = ""
    # The teams the reader may see (``runs.dashboard.teams.teams_for``): the list, its search,
    # and a bulk action by filter never reach beyond them. None: every team.
    teams: frozenset[str] | None = None


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


def runs_filtered(
    *,
    flt: RunFilter,
    now: datetime,
    indexed_search: bool = True,
    teams: Collection[str] | None = None,
) -> QuerySet[Run]:
    """Runs matching a filter, without the large columns; unordered. With ``indexed_search``
    off the words are matched row by row, never through the trigram index (``runs_page``
    filters a bounded range of the newest runs that way). ``teams``: only those teams' runs
    (None: every team; ``runs.dashboard.teams.scope_runs``)."""
    qs = Run.objects.defer(*_LIST_DEFERRED)
    if teams is not None:
        qs = qs.filter(team__in=list(teams))
    if flt.teams is not None:
        qs = qs.filter(team__in=list(flt.teams))
    if flt.team:
        qs = qs.filter(team=flt.team)
    if flt.status == LEASE_EXPIRED:
        qs = qs.filter(status=RunStatus.RUNNING, lease_expires_at__lt=now)
    elif flt.status:
        qs = qs.filter(status=flt.status)
    if flt.reason:
        qs = qs.filter(reason=flt.reason)
    if flt.agent:
        qs = qs.filter(agent=flt.agent)
    if flt.schedule:
        qs = qs.filter(schedule=flt.schedule)
    if flt.older_than is not None:
        cutoff = now - flt.older_than
        # A run is created before its status changes, so the second condition adds no
        # filtering; it lets the newest-first scan start at the cutoff instead of the top.
        qs = qs.filter(status_changed_at__lte=cutoff, created_at__lte=cutoff)
    if flt.search:
        qs = qs.filter(search_condition(flt.search, indexed=indexed_search))
    if flt.taken:
        qs = qs.filter(taken_condition(flt.taken, who=flt.taker))
    return qs


#: The text the word search matches on PostgreSQL, upper-cased: the run's own columns and
#: ``search_steps`` (its effect and failed steps, kept by triggers). The trigram index
#: ``run_search_trgm`` (migration 0018) is over exactly this expression.
RUN_SEARCH_DOC = (
    "UPPER(run_id || ' ' || title || ' ' || labels::text || ' ' || blocked_step_id || ' ' "
    "|| LEFT(error, 300) || ' ' || LEFT(detail, 300) || ' ' || search_steps)"
)
SEARCH_MAX_WORDS = 8
_RUN_ID_PREFIX = re.compile(r"run_[0-9a-f]*")
SEARCH_MAX_WORD = 100
#: A word shorter than this has no trigram: beside longer words it is left out.
SEARCH_MIN_WORD = 3


def search_words(text: str) -> list[str]:
    """The words of a search, as typed (duplicates dropped, at most ``SEARCH_MAX_WORDS`` of at
    most ``SEARCH_MAX_WORD`` characters; characters a query cannot carry, such as NUL, are
    dropped)."""
    words: list[str] = []
    for raw in text.split():
        word = "".join(c for c in raw if queryable(c))[:SEARCH_MAX_WORD]
        if word and word.upper() not in (w.upper() for w in words):
            words.append(word)
    return words[:SEARCH_MAX_WORDS]


def _like(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_condition(text: str, *, indexed: bool = True) -> Q:
    """What the list's search box means, each case served by an index on PostgreSQL:

    - one ``run_…`` word of hex digits: a run id prefix (a range scan of the primary key: an
      id that starts with the prefix sorts at or after it);
    - one ``key:value`` word: that label, exactly (GIN index on ``labels``), or the word in the
      run's text (an effect key has colons too);
    - words: every word, in any order and any case, somewhere in the run's id (with or without
      ``run_``), title, labels, blocked step, error or detail, or in the id, effect key or error
      of one of its effect or failed steps. On PostgreSQL one trigram index scan over
      ``RUN_SEARCH_DOC`` (words of one or two characters are left out beside longer ones; a
      search of only such words is a run id prefix); elsewhere ``LIKE`` over the runs and
      their steps.
    """
    words = search_words(text)
    if not words:
        return Q()
    if len(words) == 1 and _RUN_ID_PREFIX.fullmatch(words[0]):
        return Q(run_id__startswith=words[0], run_id__gte=words[0])
    if connection.vendor != "postgresql":
        return _search_scanning(words)
    if all(len(w) < SEARCH_MIN_WORD for w in words):
        prefix = f"run_{words[0].lower()}"
        return Q(run_id__startswith=prefix, run_id__gte=prefix)
    # A word of one or two characters has no trigram, and the planner takes it for a filter
    # independent of the others ("gave up": the estimate falls 14-fold and a common phrase's
    # matches are all fetched and sorted): beside a longer word it is left out.
    long_words = [w for w in words if len(w) >= SEARCH_MIN_WORD]
    if indexed:
        condition = Q()
        for word in long_words:
            condition &= Q(_doc_like(word))
    else:
        condition = Q(_doc_like_all(long_words))
    if len(words) == 1:
        key, colon, value = words[0].partition(":")
        if colon and key and value:
            condition |= Q(labels__contains={key: value})
    return condition


def _doc_like(word: str) -> RawSQL:
    return RawSQL(f"{RUN_SEARCH_DOC} LIKE %s", (_like(word.upper()),), output_field=BooleanField())


def _doc_like_all(words: list[str]) -> RawSQL:
    """Every word in the run's text, row by row: ``|| ''`` makes it another expression than
    the index's (the planner cannot take the trigram index for it, it filters the rows the
    rest of the query reads), and ``LIKE ALL`` builds each row's text once for all words."""
    patterns = [_like(w.upper()) for w in words]
    return RawSQL(
        f"({RUN_SEARCH_DOC} || '') LIKE ALL (%s)", (patterns,), output_field=BooleanField()
    )


def is_trigram_search(text: str) -> bool:
    """Whether ``search_condition`` answers ``text`` through the trigram index."""
    words = search_words(text)
    if not words or connection.vendor != "postgresql":
        return False
    if len(words) == 1 and _RUN_ID_PREFIX.fullmatch(words[0]):
        return False
    return any(len(w) >= SEARCH_MIN_WORD for w in words)


#: The newest runs a word search filters row by row before it asks the trigram index
#: (``runs_page``).
SEARCH_WINDOW = 2_000


def _search_scanning(words: list[str]) -> Q:
    """The search without PostgreSQL's triggers and index: each word in a run column or in one
    of its steps' (SQLite, the embedded default: a demo's few thousand runs)."""
    condition = Q()
    for word in words:
        steps = Step.objects.filter(
            Q(step_id__icontains=word) | Q(effect_key__icontains=word) | Q(error__icontains=word)
        ).values("run_id")
        either = (
            Q(run_id__icontains=word)
            | Q(title__icontains=word)
            | Q(blocked_step_id__icontains=word)
            | Q(error__icontains=word)
            | Q(detail__icontains=word)
            | Q(run_id__in=steps)
        )
        key, colon, value = word.partition(":")
        if colon and key and value:
            either |= Q(labels__has_key=key) & Q(**{f"labels__{key}": value})
        else:
            either |= Q(labels__icontains=word)
        condition &= either
    return condition


def runs_page(
    *,
    flt: RunFilter,
    now: datetime,
    after: Cursor | None = None,
    limit: int = 50,
    teams: Collection[str] | None = None,
) -> RunPage:
    """One page of the list in the filter's order, starting after ``after``; ``teams``: only
    those teams' runs (None: every team).

    ``newest`` orders by creation, newest first; ``oldest`` by time in the current state,
    longest first (with a status of needs_attention: the oldest-blocked first).
    """
    if flt.order != "oldest" and flt.search and is_trigram_search(flt.search):
        page = _newest_window_page(flt=flt, now=now, after=after, limit=limit, teams=teams)
        if page is not None:
            return page
    qs = runs_filtered(flt=flt, now=now, teams=teams)
    if flt.order == "oldest":
        qs = qs.order_by("status_changed_at", "run_id")
        if after is not None:
            # The first condition bounds the index range; the second breaks ties by id.
            qs = qs.filter(status_changed_at__gte=after.at).filter(
                Q(status_changed_at__gt=after.at) | Q(run_id__gt=after.run_id)
            )
    else:
        qs = _after_newest(qs.order_by("-created_at", "-run_id"), after)
    return _page_of(list(qs[: limit + 1]), flt=flt, limit=limit)


def _page_of(rows: list[Run], *, flt: RunFilter, limit: int) -> RunPage:
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = None
    if more and rows:
        last = rows[-1]
        at = last.status_changed_at if flt.order == "oldest" else last.created_at
        cursor = Cursor(at=at, run_id=last.run_id)
    return RunPage(runs=rows, next_cursor=cursor)


def _after_newest(qs: QuerySet[Run], after: Cursor | None) -> QuerySet[Run]:
    if after is None:
        return qs
    return qs.filter(created_at__lte=after.at).filter(
        Q(created_at__lt=after.at) | Q(run_id__lt=after.run_id)
    )


def _newest_window_page(
    *,
    flt: RunFilter,
    now: datetime,
    after: Cursor | None,
    limit: int,
    teams: Collection[str] | None = None,
) -> RunPage | None:
    """A newest-first page of a word search from the ``SEARCH_WINDOW`` newest runs (after the
    cursor), or None when they hold too few matches to fill it.

    The trigram index finds a word's runs in any order: for a common word ("gave up": every
    failed run, 5 % of a million) that is tens of thousands of rows fetched and sorted to show
    fifty, ~400 ms. The newest runs in ``created_at`` order, filtered row by row, find such a
    word's first page in a few thousand rows; a rare word leaves the window short and the
    caller asks the index, which is quick for it. Exact either way: a window that fills the
    page holds every match newer than its last row.
    """
    order = ("-created_at", "-run_id")
    edge = list(
        _after_newest(Run.objects.order_by(*order), after).values_list("created_at", "run_id")[
            SEARCH_WINDOW - 1 : SEARCH_WINDOW
        ]
    )
    qs = _after_newest(runs_filtered(flt=flt, now=now, indexed_search=False, teams=teams), after)
    if edge:
        at, run_id = edge[0]
        qs = qs.filter(created_at__gte=at).filter(Q(created_at__gt=at) | Q(run_id__gte=run_id))
    rows = list(qs.order_by(*order)[: limit + 1])
    if edge and len(rows) <= limit:
        return None  # the window is not the whole rest, and it does not fill the page
    return _page_of(rows, flt=flt, limit=limit)


# --- one run -------------------------------------------------------------------------------


_Rows = TypeVar("_Rows", bound=QuerySet[Any])


def run_detail(*, run_id: str, teams: Collection[str] | None = None) -> Run:
    """The run with its parent; raises Run.DoesNotExist (also when it is not of ``teams``;
    None: every team)."""
    return scoped(Run.objects.select_related("parent"), teams).get(pk=run_id)


def scoped(qs: _Rows, teams: Collection[str] | None, *, field: str = "team") -> _Rows:
    """``qs`` narrowed to the runs (or rows of runs: ``field="run__team"``) of ``teams``."""
    return qs if teams is None else qs.filter(**{f"{field}__in": list(teams)})


def runs_by_ids(*, run_ids: list[str]) -> QuerySet[Run]:
    """The runs of ``run_ids`` (those that exist, in no particular order): one query."""
    return Run.objects.filter(pk__in=run_ids)


@dataclass(frozen=True)
class Progress:
    """How far a running run has got: its recorded steps and the row written last."""

    count: int
    last: Step | None


def run_titles(run_ids: list[str]) -> dict[str, str]:
    """The titles of some runs by id (one primary-key read; a run without a title, or gone,
    is left out): for pages that name runs they did not load."""
    wanted = sorted({r for r in run_ids if r and queryable(r)})
    if not wanted:
        return {}
    rows = Run.objects.filter(pk__in=wanted).exclude(title="").values_list("run_id", "title")
    return dict(rows)


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


def run_children(
    *, run_id: str, limit: int = 20, teams: Collection[str] | None = None
) -> list[Run]:
    """Forks and continuations of a run, oldest first (at most ``limit`` + 1, to show 'more')."""
    return list(
        scoped(Run.objects.filter(parent_id=run_id), teams)
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


@dataclass(frozen=True)
class StepPage:
    """One page of a run's step table: the rows' pks in execution order, the run's step
    counts, and the positions (0-based, in execution order) of the steps asked about."""

    number: int
    pks: list[int]
    total: int
    on_chain: int
    positions: dict[str, int]


_CHAIN_IN_SEQ_SQL = """
SELECT count(*),
       count(*) FILTER (WHERE NOT linked),
       bool_or(n = 1 AND status = 'abandoned'),
       min(n) FILTER (WHERE step_id = %s),
       min(n) FILTER (WHERE step_id = %s)
  FROM (SELECT step_id, status, row_number() OVER w AS n,
               (lead(step_id) OVER w IS NULL
                OR next_step_id IS NOT DISTINCT FROM lead(step_id) OVER w) AS linked
          FROM ledger_step WHERE run_id = %s WINDOW w AS (ORDER BY seq)) AS rows
"""


def step_page(
    *, run_id: str, page: int, per_page: int, focus: str = "", blocked: str = ""
) -> StepPage:
    """The page ``page`` (1-based; clamped) of the run's steps in execution order, or the page
    holding ``focus`` when it is one of the run's steps; ``positions`` has ``focus`` and
    ``blocked`` when they are.

    When the run's ``next_step_id`` chain runs in ``seq`` order through every row (the usual
    case: no replanned branch, no abandoned first row), execution order is ``seq`` order and
    one aggregate over the (run, seq) index says so: the page is then a range of that index,
    and nothing else of the run's rows reaches Python. Otherwise the chain is walked
    (``step_chain``: every row's four narrow columns).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(_CHAIN_IN_SEQ_SQL, [focus, blocked, run_id])
            total, unlinked, first_abandoned, focus_n, blocked_n = cur.fetchone()
        if not unlinked and not first_abandoned:
            positions = {
                name: n - 1 for name, n in ((focus, focus_n), (blocked, blocked_n)) if name and n
            }
            number = _clamp_page(page, per_page, total, positions.get(focus))
            start = (number - 1) * per_page
            pks = list(
                Step.objects.filter(run_id=run_id)
                .order_by("seq")
                .values_list("pk", flat=True)[start : start + per_page]
            )
            return StepPage(
                number=number, pks=pks, total=total, on_chain=total, positions=positions
            )
    chain = step_chain(run_id=run_id)
    positions = {name: chain.index_of[name] for name in (focus, blocked) if name in chain.index_of}
    number = _clamp_page(page, per_page, len(chain.pks), positions.get(focus))
    start = (number - 1) * per_page
    return StepPage(
        number=number,
        pks=chain.pks[start : start + per_page],
        total=len(chain.pks),
        on_chain=chain.on_chain,
        positions=positions,
    )


def _clamp_page(page: int, per_page: int, total: int, focus: int | None) -> int:
    pages = max(-(-total // per_page), 1)
    if focus is not None:
        return focus // per_page + 1
    return min(max(page, 1), pages)


def steps_for_page(*, run_id: str, pks: list[int], with_inputs_head: bool = False) -> list[Step]:
    """The given steps of a run in the given order, with a head of each result, not all of it
    (and of its inputs, ``story.inputs_heads``, with ``with_inputs_head``): one query."""
    head = Left(Cast("result", output_field=TextField()), RESULT_HEAD_CHARS + 1)
    rows = (
        Step.objects.filter(run_id=run_id, pk__in=pks)
        .defer("result", "inputs")
        .annotate(result_head=head, **(inputs_head_annotations() if with_inputs_head else {}))
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


def runs_due_to_wake(*, now: datetime, limit: int = 100) -> list[tuple[str, datetime]]:
    """Released runs (a sleep, a wait for an event, a retry's back-off, a delayed start) whose
    ``wake_at`` has come and that nobody touched since: their timed message may be late or lost
    (held by a worker that died, or a broker's visibility timeout), so the sweep wakes them."""
    rows = (
        Run.objects.filter(status=RunStatus.QUEUED, wake_at__lte=now, updated_at__lt=F("wake_at"))
        .order_by("wake_at")
        .values_list("run_id", "updated_at")[:limit]
    )
    return list(rows)


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
