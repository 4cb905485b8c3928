"""The engine's step writes, as hand-written SQL on the connection Django already holds.

This is the product's hot path: one fenced statement per commit on PostgreSQL (a CTE that takes
the run row ``FOR SHARE`` with the caller's lease token, then writes), about 7x fewer round
trips and far less Python than the ORM. SQLite, the demo's default, runs the same writes as a
few statements inside ``BEGIN IMMEDIATE`` (settings set the transaction mode), which holds the
database write lock from the lease check to the commit. Every difference between the two
databases lives in this module.

A write whose lease check fails changes nothing and raises ``LeaseLost``. Every write bumps
the row's ``version`` (an INSERT takes the column's database default, 1): the operator
functions compare it with the version a person saw before they change the row.

What keeps the PostgreSQL write cheap (``manage.py bench_levers`` measures each):
- the statements are prepared on the server once per connection (``_pg_cursor``) and planned
  once (``_tune``: a generic plan; re-planning the CTE at each step cost half the floor);
- a write sends only the CTEs it needs (no ``gone`` without rows to abandon, no ``prev``
  without a row to link): an empty data-modifying CTE still costs its executor set-up;
- with nothing watching the connection (production), the statement goes straight to a
  psycopg cursor the connection keeps (``_pg_fetch``), not through Django's cursor wrapper;
- the previous row and the abandoned rows are found by the unique (run_id, step_id) index,
  never through a join on the lease (which let the planner scan the table);
- linking the previous row changes only ``next_step_id`` and ``version``, no indexed column,
  so PostgreSQL can update it in place (HOT) without touching the indexes; its ``updated_at``
  stays the time of its own outcome (a started effect's "waiting since" must not move);
- ledger_step carries no index that the unique (run_id, step_id) one already covers.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from time import perf_counter
from typing import Any

from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.dispatch import receiver

from ledger import canonical, observe
from ledger.conf import conf
from ledger.errors import LeaseLost


@dataclass
class StepWrite:
    """One step's first (or only) write in an execution."""

    run_id: str
    token: str
    step_id: str
    status: str
    kind: str
    tool: str
    seq: int
    input_hash: str
    inputs_json: str | None
    inputs_truncated: bool
    attempt: int
    now: datetime
    result_json: str | None = None
    effect_key: str | None = None
    error: str = ""
    errors_json: str = "[]"
    expires_at: datetime | None = None
    model_id: str = ""
    prompt_hash: str = ""
    # A model step's usage and cost (ledger.usage); None where unknown or not a model step.
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: str | None = None  # a decimal's text, exact
    finished: bool = False
    prev_step_id: str | None = None
    abandon: Sequence[str] = ()
    # A fan-out sibling is written already linked to the next sibling (ctx.parallel); other
    # steps are linked by their successor's write (prev_step_id). NULL keeps a stored link.
    next_step_id: str | None = None


def stored_inputs(text: str, limit: int | None = None) -> tuple[str | None, bool]:
    """The canonical inputs as the ledger stores them for the stale diff: whole up to ``limit``
    (RUNLEDGER_MAX_STORED_INPUT_BYTES), else a marked preview. Returns (json text, truncated).
    """
    if limit is None:
        limit = conf.RUNLEDGER_MAX_STORED_INPUT_BYTES
    if len(text) * 4 <= limit:  # no character is more than 4 bytes in UTF-8: no need to encode
        return text, False
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    preview = data[: max(limit - 200, 0)].decode("utf-8", "ignore")
    return canonical.dumps({"truncated": True, "bytes": len(data), "preview": preview}), True


def _is_pg() -> bool:
    return connection.vendor == "postgresql"


@functools.cache
def _prepared_cursor_class() -> type:
    """A psycopg cursor that binds on the server and prepares every statement it runs.

    Django's own cursors bind parameters on the client (the 2 KB CTE is re-sent and
    re-planned at every step) and Django turns psycopg's automatic preparation off. The
    engine's few statements are prepared once per connection and then sent as a name and
    parameters. Only the step writes use it; everything else keeps Django's cursor. A raw
    cursor: the statements come with ``$n`` placeholders and their parameters in order
    (``_Statement``), so psycopg neither rewrites the query nor reorders a dict each time.
    """
    import psycopg
    from django.db.backends.postgresql.base import CursorMixin

    class PreparedCursor(CursorMixin, psycopg.RawCursor):  # type: ignore[misc,valid-type]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return super().execute(query, params, prepare=True)

    return PreparedCursor


@functools.cache
def _server_cursor_class() -> type:
    import psycopg

    return psycopg.RawCursor


@dataclass(frozen=True)
class _Statement:
    """One of the engine's statements in both forms: ``named`` (``%(name)s``, with a dict:
    Django's client-binding cursor, RUNLEDGER_PG_PREPARE off) and ``sql`` (``$n``, with the
    parameters in order: the prepared raw cursor); ``order`` picks that order from the dict."""

    named: str
    sql: str
    order: Any  # operator.itemgetter over the parameter names, in $n order


def _positional(named: str) -> _Statement:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    sql = re.sub(r"%\((\w+)\)s", number, named)
    assert "%" not in sql and len(names) > 1, "a statement needs two named parameters or more"
    return _Statement(named=named, sql=sql, order=itemgetter(*names))


def _pg_cursor() -> Any:
    """A preparing cursor on the connection Django holds (same transaction, same test
    isolation, the same query logging and execute wrappers), for RUNLEDGER_PG_PREPARE on
    (off, for a pooler in transaction mode where a prepared statement may not outlive it,
    ``_pg_fetch`` takes Django's own cursor)."""
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    conn = db.connection
    _tune(db, conn)
    db.validate_thread_sharing()
    raw = _prepared_cursor_class()(conn)
    # Wrapped as Django wraps its own: query logging and execute wrappers see the statement.
    return db.make_debug_cursor(raw) if db.queries_logged else db.make_cursor(raw)


def _tune(db: Any, conn: Any) -> None:
    """Set up a psycopg connection for the engine's prepared statements, once.

    Django sets ``prepare_threshold`` None (never prepare). A threshold no statement reaches
    keeps Django's own queries unprepared while the engine's, executed with prepare=True, are.
    And the session plans a prepared statement once (``plan_cache_mode``): left to itself,
    PostgreSQL re-plans the fenced CTE at every execution (its estimate for the generic plan,
    with an ``abandon`` list of unknown length, is always above the custom plan's for an empty
    one), which cost ~0.15 ms of server time per step, half the floor (``bench_levers``:
    ``custom_plan``). The generic plan uses the same unique indexes. Only prepared statements
    are affected, and only the engine's are prepared. The setting is made outside any
    transaction (in autocommit), so that no rollback undoes it; a connection met inside an
    atomic block is set up at its next write outside one.
    """
    if conn.prepare_threshold is None:
        conn.prepare_threshold = 2**31 - 1
    if db.__dict__.get("_runledger_tuned") is conn or not conn.autocommit:
        return
    from psycopg.pq import TransactionStatus

    if conn.info.transaction_status == TransactionStatus.IDLE:
        with db.wrap_database_errors:
            conn.execute("SET plan_cache_mode = force_generic_plan")
        db.__dict__["_runledger_tuned"] = conn


@receiver(setting_changed)
def _retune(*, setting: str, **kwargs: Any) -> None:
    """RUNLEDGER_PG_PREPARE changed (a test's override): this thread's connections are set up
    again by their next write (``_tune`` marks only a connection that prepares)."""
    if setting == "RUNLEDGER_PG_PREPARE":
        for db in connections.all(initialized_only=True):
            db.__dict__.pop("_runledger_tuned", None)


def _pg_fetch(db: Any, statement: _Statement, params: dict[str, Any]) -> Any:
    """Execute one of the engine's statements on the connection Django holds; its one row.

    When nothing watches the connection's statements (no execute wrappers, no query log:
    production), the statement goes straight to a psycopg cursor that the connection keeps,
    with Django's error translation (``DatabaseError``, and ``errors_occurred`` so that a
    broken connection is dropped) and its broken-transaction check; Django's cursor wrapper,
    a new cursor per step and the proxy lookups cost ~25 µs a step. Otherwise (the tests'
    ownership guard, ``CaptureQueriesContext``, DEBUG) through Django's wrapped cursor.
    """
    conn = db.connection
    if (
        conn is None
        or db.execute_wrappers
        or db.queries_logged
        or db.needs_rollback
        or (db.health_check_enabled and not db.health_check_done)
        or db.__dict__.get("_runledger_tuned") is not conn  # RUNLEDGER_PG_PREPARE on (_tune)
    ):
        if not conf.RUNLEDGER_PG_PREPARE:  # Django's cursor, bound on the client (a pooler)
            with connection.cursor() as cur:
                cur.execute(statement.named, params)
                return cur.fetchone()
        with _pg_cursor() as cur:
            cur.execute(statement.sql, statement.order(params))
            return cur.fetchone()
    cur = db.__dict__.get("_runledger_cursor")
    if cur is None or cur.connection is not conn or cur.closed:
        db.validate_thread_sharing()
        # psycopg's own server-binding cursor: Django's cursor_factory binds on the client
        cur = db.__dict__["_runledger_cursor"] = _server_cursor_class()(conn)
    with db.wrap_database_errors:
        cur.execute(statement.sql, statement.order(params), prepare=True)
        return cur.fetchone()


def _dt(value: datetime | None) -> Any:
    return connection.ops.adapt_datetimefield_value(value) if value is not None else None


# --- the parts every write of a step row shares (PostgreSQL and SQLite alike) -------------

_INSERT = """INSERT INTO ledger_step (
    run_id, step_id, input_hash, status, result, next_step_id, attempt, effect_key, updated_at,
    kind, tool, seq, inputs, inputs_truncated, error, errors, started_at, finished_at,
    expires_at, model_id, prompt_hash, tokens_in, tokens_out, cost_usd, settled_by
)"""
# A step executed again over its old row (a retried failure, a replan's abandoned row) takes
# the new execution's values; a stored link to the next step is kept unless a new one is given.
_ON_CONFLICT = """ON CONFLICT (run_id, step_id) DO UPDATE SET
    input_hash = EXCLUDED.input_hash, status = EXCLUDED.status, result = EXCLUDED.result,
    next_step_id = COALESCE(EXCLUDED.next_step_id, ledger_step.next_step_id),
    attempt = EXCLUDED.attempt, effect_key = EXCLUDED.effect_key,
    updated_at = EXCLUDED.updated_at, kind = EXCLUDED.kind, tool = EXCLUDED.tool,
    inputs = EXCLUDED.inputs, inputs_truncated = EXCLUDED.inputs_truncated,
    error = EXCLUDED.error, errors = EXCLUDED.errors, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, expires_at = EXCLUDED.expires_at,
    model_id = EXCLUDED.model_id, prompt_hash = EXCLUDED.prompt_hash,
    tokens_in = EXCLUDED.tokens_in, tokens_out = EXCLUDED.tokens_out,
    cost_usd = EXCLUDED.cost_usd, settled_by = '',
    version = ledger_step.version + 1"""

# --- PostgreSQL: one statement, one round trip, one commit --------------------------------

_PG_LEASE = """
lease AS (
    SELECT run_id FROM ledger_run
    WHERE run_id = %(run_id)s AND lease_token = %(token)s AND status = 'running'
    FOR SHARE
)"""
# A write that also changes rows other than its own (the previous step's link, a replan's
# abandoned branch) takes the run row exclusively instead: fan-out siblings commit from their
# own connections at once, and two such writes locking the same step rows in different orders
# would deadlock. Behind the run row they go one at a time; plain sibling writes, which lock
# only their own row, still share it.
_PG_LEASE_EXCLUSIVE = _PG_LEASE.replace("FOR SHARE", "FOR NO KEY UPDATE")

_PG_UPSERT_BODY = (
    """,
prev AS (
    UPDATE ledger_step SET next_step_id = %(step_id)s, version = version + 1
    WHERE run_id = %(run_id)s AND step_id = %(prev_step_id)s AND EXISTS (SELECT FROM lease)
),
gone AS (
    UPDATE ledger_step SET status = 'abandoned', updated_at = %(now)s, version = version + 1
    WHERE run_id = %(run_id)s AND step_id = ANY(%(abandon)s) AND EXISTS (SELECT FROM lease)
)
"""
    + _INSERT
    + """
SELECT run_id, %(step_id)s, %(input_hash)s, %(status)s, %(result)s::jsonb, %(next_step_id)s,
    %(attempt)s,
    %(effect_key)s, %(now)s, %(kind)s, %(tool)s, %(seq)s, %(inputs)s::jsonb,
    %(inputs_truncated)s, %(error)s, %(errors)s::jsonb, %(now)s, %(finished_at)s,
    %(expires_at)s, %(model_id)s, %(prompt_hash)s, %(tokens_in)s::int, %(tokens_out)s::int,
    %(cost_usd)s::numeric, ''
FROM lease
"""
    + _ON_CONFLICT
    + """
RETURNING id"""
)
_PG_UPSERT = "WITH" + _PG_LEASE + _PG_UPSERT_BODY
_PG_UPSERT_EXCLUSIVE = "WITH" + _PG_LEASE_EXCLUSIVE + _PG_UPSERT_BODY
# The same writes without the CTEs they would run for nothing: a data-modifying CTE costs its
# executor set-up (the table and its indexes opened) even when it changes no row, ~0.03 ms of
# server time each, a tenth of the floor. A step that links its previous one and abandons
# nothing (nearly every step) skips ``gone``; a write that touches no other row (a fan-out
# sibling) skips both. Same rows written, same lock on the run row as the full statement.
_PG_GONE = _PG_UPSERT_BODY[
    _PG_UPSERT_BODY.index(",\ngone AS (") : _PG_UPSERT_BODY.index("\nINSERT INTO ledger_step")
]
_PG_PREV = _PG_UPSERT_BODY[: _PG_UPSERT_BODY.index(",\ngone AS (")]
_PG_UPSERT_LINK = "WITH" + _PG_LEASE_EXCLUSIVE + _PG_UPSERT_BODY.replace(_PG_GONE, "")
_PG_UPSERT_ALONE = "WITH" + _PG_LEASE + _PG_UPSERT_BODY.replace(_PG_PREV + _PG_GONE, "")

_PG_UPDATE = (
    "WITH"
    + _PG_LEASE
    + """
UPDATE ledger_step SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s,
    errors = %(errors)s::jsonb, finished_at = %(now)s, updated_at = %(now)s,
    expires_at = %(expires_at)s, settled_by = %(settled_by)s, version = version + 1
WHERE id = %(pk)s AND run_id IN (SELECT run_id FROM lease)
RETURNING id"""
)

# --- SQLite: the same writes inside BEGIN IMMEDIATE ---------------------------------------

_SQLITE_LEASE = (
    "SELECT 1 FROM ledger_run WHERE run_id = %(run_id)s AND lease_token = %(token)s "
    "AND status = 'running'"
)
_SQLITE_PREV = (
    "UPDATE ledger_step SET next_step_id = %(step_id)s, "
    "version = version + 1 WHERE run_id = %(run_id)s AND step_id = %(prev_step_id)s"
)
_SQLITE_UPSERT = (
    """
"""
    + _INSERT
    + """ VALUES (
    %(run_id)s, %(step_id)s, %(input_hash)s, %(status)s, %(result)s, %(next_step_id)s, %(attempt)s,
    %(effect_key)s, %(now)s, %(kind)s, %(tool)s, %(seq)s, %(inputs)s, %(inputs_truncated)s,
    %(error)s, %(errors)s, %(now)s, %(finished_at)s, %(expires_at)s, %(model_id)s,
    %(prompt_hash)s, %(tokens_in)s, %(tokens_out)s, %(cost_usd)s, ''
)
"""
    + _ON_CONFLICT
    + """
RETURNING id"""
)
_SQLITE_UPDATE = """
UPDATE ledger_step SET status = %(status)s, result = %(result)s, error = %(error)s,
    errors = %(errors)s, finished_at = %(now)s, updated_at = %(now)s, expires_at = %(expires_at)s,
    settled_by = %(settled_by)s, version = version + 1
WHERE id = %(pk)s AND run_id = %(run_id)s
RETURNING id"""


def step_write(w: StepWrite) -> int:
    """Insert or overwrite a step row, point the previous step at it, abandon a diverged branch.

    All in one transaction that holds the run's lease; returns the row's primary key. Reports
    ``step_written`` (ledger.observe) after the commit.
    """
    if not observe.watched():
        return _step_write(w)
    started = perf_counter()
    pk = _step_write(w)
    observe.emit(
        "step_written",
        run_id=w.run_id,
        step_id=w.step_id,
        kind=str(w.kind),
        status=str(w.status),
        seconds=perf_counter() - started,
    )
    return pk


def _step_write(w: StepWrite) -> int:
    db = connections[DEFAULT_DB_ALIAS]
    pg = db.vendor == "postgresql"
    # psycopg adapts datetimes itself (Django's adapt_datetimefield_value is the identity there)
    now = w.now if pg else _dt(w.now)
    params = {
        "run_id": w.run_id,
        "token": w.token,
        "step_id": w.step_id,
        "input_hash": w.input_hash,
        "status": str(w.status),
        "result": w.result_json,
        "attempt": w.attempt,
        "effect_key": w.effect_key,
        "now": now,
        "kind": str(w.kind),
        "tool": w.tool,
        "seq": w.seq,
        "inputs": w.inputs_json,
        "inputs_truncated": w.inputs_truncated,
        "error": w.error,
        "errors": w.errors_json,
        "finished_at": now if w.finished else None,
        "expires_at": w.expires_at if pg else _dt(w.expires_at),
        "model_id": w.model_id,
        "prompt_hash": w.prompt_hash,
        "tokens_in": w.tokens_in,
        "tokens_out": w.tokens_out,
        "cost_usd": w.cost_usd,
        "prev_step_id": w.prev_step_id,
        "abandon": list(w.abandon),
        "next_step_id": w.next_step_id,
    }
    if pg:
        if w.abandon:
            statement = _PG_STEP_EXCLUSIVE
        elif w.prev_step_id is not None:
            statement = _PG_STEP_LINK
        else:
            statement = _PG_STEP_ALONE
        row = _pg_fetch(db, statement, params)
        if row is None:
            raise LeaseLost(w.run_id)
        return int(row[0])
    del params["abandon"]  # SQLite binds no lists; the abandoned rows are updated one by one
    with transaction.atomic(), connection.cursor() as cur:
        _sqlite_fence(cur, params)
        if w.prev_step_id is not None:
            cur.execute(_SQLITE_PREV, params)
        for step_id in w.abandon:
            cur.execute(
                "UPDATE ledger_step SET status = 'abandoned', updated_at = %s, "
                "version = version + 1 WHERE run_id = %s AND step_id = %s",
                [params["now"], w.run_id, step_id],
            )
        cur.execute(_SQLITE_UPSERT, params)
        return int(cur.fetchone()[0])


# --- batched durability: many finished steps in one statement ------------------------------

_PG_BATCH = (
    "WITH"
    + _PG_LEASE_EXCLUSIVE
    + _PG_PREV  # %(step_id)s: the batch's first step
    + """,
batch AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS b(
        step_id text, input_hash text, result jsonb, next_step_id text, attempt int,
        kind text, tool text, seq int, inputs jsonb, truncated bool, now timestamptz,
        expires_at timestamptz, model_id text, prompt_hash text, tokens_in int,
        tokens_out int, cost_usd numeric
    )
),
written AS (
"""
    + _INSERT
    + """
SELECT lease.run_id, b.step_id, b.input_hash, 'succeeded', b.result, b.next_step_id,
    b.attempt, NULL, b.now, b.kind, b.tool, b.seq, b.inputs, b.truncated, '', '[]',
    b.now, b.now, b.expires_at, b.model_id, b.prompt_hash, b.tokens_in, b.tokens_out,
    b.cost_usd, ''
FROM lease, batch b
"""
    + _ON_CONFLICT
    + """
RETURNING 1
)
SELECT count(*) FROM written"""
)


_PG_STEP_EXCLUSIVE = _positional(_PG_UPSERT_EXCLUSIVE)
_PG_STEP_LINK = _positional(_PG_UPSERT_LINK)
_PG_STEP_ALONE = _positional(_PG_UPSERT_ALONE)
_PG_UPDATE_STATEMENT = _positional(_PG_UPDATE)
_PG_BATCH_STATEMENT = _positional(_PG_BATCH)


def step_write_batch(writes: Sequence[StepWrite]) -> None:
    """Commit finished, succeeded steps of one run (batched durability) in one statement.

    ``writes`` are in chain order: each is written linked to the next, the first links the
    step before it (its ``prev_step_id``), and the last's link is written by the step after it
    — as if each had been committed on its own. Fenced by the lease token like every step
    write: nothing is written and ``LeaseLost`` is raised when the lease is not held. Inside
    the caller's transaction, if any (an effect's intent commits with the batch ahead of it).
    Reports ``step_written`` once per kind of step in the batch (with its ``count``).
    """
    if not writes:
        return
    started = perf_counter()
    first = writes[0]
    links = [w.step_id for w in writes[1:]] + [writes[-1].next_step_id]
    if _is_pg():
        params = {
            "run_id": first.run_id,
            "token": first.token,
            "step_id": first.step_id,
            "prev_step_id": first.prev_step_id,
            "rows": "[" + ",".join(map(_batch_row, writes, links)) + "]",
        }
        (written,) = _pg_fetch(connections[DEFAULT_DB_ALIAS], _PG_BATCH_STATEMENT, params)
        if written != len(writes):
            raise LeaseLost(first.run_id)
    else:
        with transaction.atomic():
            for w, link in zip(writes, links, strict=True):
                w.next_step_id = link
                w.prev_step_id = w.prev_step_id if w is first else None
                _step_write(w)
    if observe.watched():
        seconds = perf_counter() - started
        for kind, count in Counter(str(w.kind) for w in writes).items():
            observe.emit(
                "step_written",
                run_id=first.run_id,
                step_id=None,
                kind=kind,
                status="succeeded",
                seconds=seconds,
                count=count,
            )


def _batch_row(w: StepWrite, next_step_id: str | None) -> str:
    """One row of a batch as a JSON object. The stored inputs and result, canonical JSON text
    already, are spliced in as they are rather than encoded a second time."""
    fields = json.dumps(
        {
            "step_id": w.step_id,
            "input_hash": w.input_hash,
            "next_step_id": next_step_id,
            "attempt": w.attempt,
            "kind": str(w.kind),
            "tool": w.tool,
            "seq": w.seq,
            "truncated": w.inputs_truncated,
            "now": w.now.isoformat(),
            "expires_at": w.expires_at.isoformat() if w.expires_at is not None else None,
            "model_id": w.model_id,
            "prompt_hash": w.prompt_hash,
            "tokens_in": w.tokens_in,
            "tokens_out": w.tokens_out,
            "cost_usd": w.cost_usd,
        }
    )
    result = w.result_json if w.result_json is not None else "null"
    inputs = w.inputs_json if w.inputs_json is not None else "null"
    return f'{fields[:-1]},"result":{result},"inputs":{inputs}}}'


def step_update(
    *,
    run_id: str,
    token: str,
    pk: int,
    status: str,
    now: datetime,
    result_json: str | None = None,
    error: str = "",
    errors_json: str = "[]",
    expires_at: datetime | None = None,
    settled_by: str = "",
) -> None:
    """Second commit of an effect (or a settled reconcile): one fenced UPDATE. ``settled_by``
    says who settled a started effect's outcome (the tool's lookup, on a resume); "" otherwise.

    Reports ``step_written`` (kind ``effect``) after the commit."""
    if not observe.watched():
        _step_update(
            run_id, token, pk, status, now, result_json, error, errors_json, expires_at, settled_by
        )
        return
    started = perf_counter()
    _step_update(
        run_id, token, pk, status, now, result_json, error, errors_json, expires_at, settled_by
    )
    observe.emit(
        "step_written",
        run_id=run_id,
        step_id=None,
        kind="effect",
        status=str(status),
        seconds=perf_counter() - started,
    )


def _step_update(
    run_id: str,
    token: str,
    pk: int,
    status: str,
    now: datetime,
    result_json: str | None,
    error: str,
    errors_json: str,
    expires_at: datetime | None,
    settled_by: str,
) -> None:
    db = connections[DEFAULT_DB_ALIAS]
    pg = db.vendor == "postgresql"
    params = {
        "run_id": run_id,
        "token": token,
        "pk": pk,
        "status": str(status),
        "result": result_json,
        "error": error,
        "errors": errors_json,
        "now": now if pg else _dt(now),
        "expires_at": expires_at if pg else _dt(expires_at),
        "settled_by": settled_by[:150],
    }
    if pg:
        if _pg_fetch(db, _PG_UPDATE_STATEMENT, params) is None:
            raise LeaseLost(run_id)
        return
    with transaction.atomic(), connection.cursor() as cur:
        _sqlite_fence(cur, params)
        cur.execute(_SQLITE_UPDATE, params)
        if cur.fetchone() is None:
            raise LeaseLost(run_id)


def _sqlite_fence(cur: Any, params: dict[str, Any]) -> None:
    cur.execute(_SQLITE_LEASE, params)
    if cur.fetchone() is None:
        raise LeaseLost(params["run_id"])
