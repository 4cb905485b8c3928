"""Measure the levers on the PostgreSQL step write, one against another: `make bench`.

Each variant is the engine's own fenced statement (``ledger.transitions.steps``), changed in one
way, executed end to end from Python (autocommit: one statement, one commit) on the
connection Django holds, in alternating rounds beside the floor (one INSERT+COMMIT):

- ``engine``: the statement as the engine sends it for a step that links its previous one
  (nearly every step): bound on the server, prepared once, planned once (the session's
  ``plan_cache_mode`` is ``force_generic_plan``, as the engine sets it);
- ``full_body``: the same with the ``gone`` CTE (abandoning no row), as every step sent it
  before the floor work;
- ``custom_plan``: the same, re-planned at every execution (PostgreSQL's choice left to itself,
  as before the floor work: its generic-plan estimate never wins for this statement);
- ``insert_only``: the engine's, without ``ON CONFLICT DO UPDATE`` (a step with no row yet);
- ``no_fk``: the engine's, with the deferred foreign key's check on ledger_run skipped
  (``session_replication_role = replica``, which fires no RI trigger: superuser only);
- ``client``: the same bound on the client, as Django's cursors do (re-sent, re-planned);
- ``join_prev``: the previous row found through a join on the lease, its ``updated_at`` bumped
  (the statement before issue 12), prepared;
- ``no_prev``: the engine's write that links nothing (a fan-out sibling's: no ``prev`` CTE,
  the run row shared);
- ``no_fence``: the engine's, the lease read without its row lock (unsafe: a lower bound only);
- ``advisory``: the engine's, a shared advisory transaction lock instead of the row lock;
- ``fat``: the engine's, with the two run_id indexes that migration 0006 dropped put back for
  a second pass (beside the engine's write again, by which it is scaled);
- ``before``: all of the above undone (client-bound, join, both indexes, the full body): the
  write before issue 12, in the second pass;
- ``no_seq_index``: the engine's without the (run_id, seq) index, in a third pass (beside the
  engine's write again; the index is recreated after it).

All prepared variants but ``custom_plan`` run planned once, as the engine's statements do.

Then the Python levers of the step write (issue 22, item 3), each a whole read-step run of the
engine (``bench_agent``) with one lever undone, in alternating rounds, measured as this
process's CPU per step (and wall): ``py_engine`` (all in), ``py_no_orjson`` (the canonical
text by json's encoder: ``canonical.USE_ORJSON`` off), ``py_no_direct_clock`` (Django's
``timezone.now`` for the step's two clock reads), ``py_named`` (the statements with named
parameters from a dict on psycopg's ``Cursor``, as before: psycopg rewrites and reorders at
each execution), ``py_before`` (all three undone), and the effect step with all in and all
undone (``py_engine_effect``, ``py_before_effect``). And the same levers alone, without the
database (``micro_*``, µs per step, best of 40 batches of 200): the inputs' and result's
canonical text and hash, the two clock reads, psycopg's binding of the 22 parameters, the
setting lookup the fast path no longer makes, two levers not made (``micro_bind_plain_statement``:
the plain read step's 11 constant parameters inlined; ``micro_connection_lookup``: Django's
context-local connection lookup the engine makes per write); and the engine's whole Python per
read step with its ledger write replaced by nothing (``micro_engine_python_read_step``).

Prints ``name: value unit`` lines (median ms per write, and x floor). Writes only runs it
creates, and deletes them afterwards; the dropped indexes are recreated after each round.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone

from harness.bench.agents import bench_agent
from harness.bench.results import merge_json
from harness.unannounced import start_unannounced
from ledger import canonical, transitions
from ledger.conf import conf
from ledger.engine import live
from ledger.models import Run, Step
from ledger.processes import execute
from ledger.transitions import steps as sql

_FENCE = "FOR NO KEY UPDATE"  # the run row's lock in a write that links the previous step
_ADVISORY = "AND pg_advisory_xact_lock_shared(hashtextextended(run_id, 0)) IS NOT NULL"
FIRST = (
    "engine", "full_body", "custom_plan", "insert_only", "no_fk", "client", "join_prev",
    "no_prev", "no_fence", "advisory",
)  # fmt: skip
SECOND = ("fat", "before")
THIRD = ("no_seq_index",)
VARIANTS = FIRST + SECOND + THIRD
_PREV_NOW = """prev AS (
    UPDATE ledger_step SET next_step_id = %(step_id)s, version = version + 1
    WHERE run_id = %(run_id)s AND step_id = %(prev_step_id)s AND EXISTS (SELECT FROM lease)
)"""
_PREV_BEFORE = """prev AS (
    UPDATE ledger_step SET next_step_id = %(step_id)s, updated_at = %(now)s,
        version = version + 1
    WHERE run_id IN (SELECT run_id FROM lease) AND step_id = %(prev_step_id)s
)"""
_DROPPED = (
    'CREATE INDEX "ledger_step_run_id_9b3bd036" ON ledger_step (run_id)',
    'CREATE INDEX "ledger_step_run_id_9b3bd036_like" ON ledger_step (run_id varchar_pattern_ops)',
)


def _statement(variant: str) -> str:
    engine = sql._PG_UPSERT_LINK
    assert _PREV_NOW in engine and _FENCE in engine, "the engine's statement changed: update me"
    if variant == "no_fence":
        return engine.replace(_FENCE, "")
    if variant == "advisory":
        return engine.replace(_FENCE, _ADVISORY)
    if variant == "join_prev":
        return engine.replace(_PREV_NOW, _PREV_BEFORE)
    if variant == "before":
        return sql._PG_UPSERT.replace(_PREV_NOW, _PREV_BEFORE)
    if variant == "insert_only":
        return engine[: engine.index("ON CONFLICT")] + "RETURNING id"
    if variant == "no_prev":
        return sql._PG_UPSERT_ALONE
    if variant == "full_body":
        return sql._PG_UPSERT_EXCLUSIVE
    return engine


class Command(BaseCommand):
    help = "Measure each lever on the PostgreSQL step write against the floor."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--writes", type=int, default=300, help="writes per variant/round")
        parser.add_argument(
            "--flush",
            action="store_true",
            help="wait for the WAL flush at each commit (default: synchronous_commit off, so "
            "that the disk's noise does not hide the statements' own cost)",
        )
        parser.add_argument("--json", default="", help="add the figures to this file")
        parser.add_argument(
            "--python-steps", type=int, default=300, help="read steps per Python lever run"
        )
        parser.add_argument(
            "--python-only", action="store_true", help="only the Python levers (py_*, micro_*)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        if connection.vendor != "postgresql":
            self.stdout.write("# bench_levers measures PostgreSQL only")
            return
        connection.ensure_connection()
        connection.connection.prepare_threshold = 2**31 - 1  # Django's None never prepares
        self._superuser = connection.connection.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]
        self._own: dict[str, psycopg.Connection[Any]] = {}
        self._sync_commit = "on" if options["flush"] else "off"
        if not options["flush"]:
            connection.connection.execute("SET synchronous_commit = off")
        connection.connection.execute("SET plan_cache_mode = force_generic_plan")  # the engine's
        self.stdout.write(f"# synchronous_commit {'on' if options['flush'] else 'off'}")
        self._runs: list[str] = []
        rounds: list[dict[str, float]] = []
        try:
            for _ in range(0 if options["python_only"] else options["rounds"]):
                rounds.append(self._round(options["writes"]))
            python = self._python(options["rounds"], options["python_steps"])
        finally:
            Step.objects.filter(run_id__in=self._runs).delete()
            Run.objects.filter(run_id__in=self._runs).delete()
        figures: dict[str, tuple[float, str]] = {}
        if rounds:
            figures["lever_floor"] = (statistics.median(r["floor"] for r in rounds), "ms")
        figures.update(python)
        for variant in VARIANTS if rounds else ():
            if any(variant not in r for r in rounds):
                self.stdout.write(f"# lever_{variant}: not measured (needs a superuser)")
                continue
            ms = statistics.median(r[variant] for r in rounds)
            ratio = statistics.median(r[variant] / r["floor"] for r in rounds)
            figures[f"lever_{variant}"] = (ms, "ms")
            figures[f"lever_{variant}_vs_floor"] = (ratio, "x")
        for name, (value, unit) in figures.items():
            self.stdout.write(f"{name}: {value:.3f} {unit}")
        if options["json"]:
            values: dict[str, Any] = {n: {"value": v, "unit": u} for n, (v, u) in figures.items()}
            values["rounds"] = {"value": rounds, "unit": "ms per write, per round"}
            key = "postgresql_python_levers" if options["python_only"] else "postgresql_levers"
            merge_json(Path(options["json"]), key, values)

    def _python(self, rounds: int, steps: int) -> dict[str, tuple[float, str]]:
        """The Python levers, on the engine's own read (and effect) steps, interleaved."""
        if steps <= 0:
            return {}
        cpu: dict[str, list[float]] = {v: [] for v in PY_VARIANTS}
        wall: dict[str, list[float]] = {v: [] for v in PY_VARIANTS}
        for _ in range(rounds):
            for variant in PY_VARIANTS:
                kind = "effect" if variant.endswith("_effect") else "read"
                with _python_levers(variant):
                    name = bench_agent(kind, steps, f"bench-py-{variant}")
                    run = start_unannounced(agent=name, inputs={})
                    self._runs.append(run.run_id)
                    started, t = time.process_time(), time.perf_counter()
                    outcome = execute.run_execute(
                        run_id=run.run_id, worker="bench", heartbeat=False
                    )
                    cpu[variant].append((time.process_time() - started) / steps * 1e6)
                    wall[variant].append((time.perf_counter() - t) / steps * 1e6)
                assert outcome is not None and outcome.status == "succeeded", outcome
        figures: dict[str, tuple[float, str]] = {}
        for variant in PY_VARIANTS:
            base = "py_engine_effect" if variant.endswith("_effect") else "py_engine"
            figures[f"lever_{variant}_cpu"] = (statistics.median(cpu[variant]), "us per step")
            figures[f"lever_{variant}_wall"] = (statistics.median(wall[variant]), "us per step")
            ratio = statistics.median(c / b for c, b in zip(cpu[variant], cpu[base], strict=True))
            figures[f"lever_{variant}_cpu_vs_engine"] = (ratio, "x")
        figures.update(_micro())
        figures["micro_engine_python_read_step"] = (self._without_writes(1000), "us per step")
        return figures

    def _without_writes(self, steps: int) -> float:
        """The engine's own Python per read step, its ledger write replaced by nothing: a run
        of ``steps`` read steps (the claim and the finish still written), best of 3. What no
        lever on the Python side can go below; the write's own cost is the rest."""
        real = transitions.step_write
        pks = iter(range(1, 10**9))
        transitions.step_write = lambda write: next(pks)  # type: ignore[assignment]
        best = []
        try:
            for i in range(3):
                name = bench_agent("read", steps, f"bench-py-nodb-{i}")
                run = start_unannounced(agent=name, inputs={})
                self._runs.append(run.run_id)
                started = time.process_time()
                execute.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
                best.append((time.process_time() - started) / steps * 1e6)
        finally:
            transitions.step_write = real
        return min(best)

    def _round(self, n: int) -> dict[str, float]:
        """One write of each variant in turn, ``n`` times, so that load hits all alike; the
        variants with the dropped indexes in a second pass, beside the engine's write again."""
        raw = connection.connection
        raw.execute("CREATE TABLE IF NOT EXISTS bench_floor (id integer, note text)")
        try:
            one = self._interleaved(["floor", *FIRST], n)
            with _with_dropped_indexes():
                second = self._interleaved(["engine", *SECOND], n)
            with _without_seq_index():
                third = self._interleaved(["engine", *THIRD], n)
        finally:
            raw.execute("DROP TABLE bench_floor")
        for later in (second, third):  # scaled by the engine's write, measured in each pass
            for variant in later.keys() - {"engine"}:
                one[variant] = later[variant] * one["engine"] / later["engine"]
        return one

    def _interleaved(self, variants: list[str], n: int) -> dict[str, float]:
        if "no_fk" in variants and not self._superuser:
            variants = [v for v in variants if v != "no_fk"]
        writers = {v: self._writer(v) for v in variants}
        samples: dict[str, list[float]] = {v: [] for v in variants}
        try:
            for i in range(n):
                for variant, write in writers.items():
                    t = time.perf_counter()
                    write(i)
                    samples[variant].append(time.perf_counter() - t)
        finally:
            for own in self._own.values():
                own.close()
            self._own.clear()
        return {v: statistics.median(s) * 1000 for v, s in samples.items()}

    def _connection(self, setting: str) -> psycopg.Connection[Any]:
        """Another connection like Django's (autocommit, the same commit mode) with ``setting``."""
        conn = psycopg.connect(
            connection.connection.info.dsn,
            password=connection.settings_dict.get("PASSWORD") or None,
            autocommit=True,
            prepare_threshold=2**31 - 1,
        )
        conn.execute(f"SET synchronous_commit = {self._sync_commit}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(setting)
        return conn

    def _writer(self, variant: str) -> Callable[[int], None]:
        prepared = variant not in ("client", "before")
        conn = connection.connection
        if variant in _SESSION:
            conn = self._own[variant] = self._connection(_SESSION[variant])
        cur = (psycopg.Cursor if prepared else psycopg.ClientCursor)(conn)
        if variant == "floor":

            def insert(i: int) -> None:
                cur.execute(_FLOOR, [i, "x"], prepare=True)

            return insert
        run = start_unannounced(agent=bench_agent("read", 0, "bench-lever"), inputs={})
        self._runs.append(run.run_id)
        token = transitions.lease_claim(run_id=run.run_id, owner="bench-levers") or ""
        statement = _statement(variant)

        def write(i: int) -> None:
            params = _params(run.run_id, token, i, prev=variant != "no_prev")
            cur.execute(statement, params, prepare=prepared or None)
            assert cur.fetchone() is not None, "lease lost"

        return write


_FLOOR = "INSERT INTO bench_floor VALUES (%s, %s)"
#: Variants that need another session run on their own connection, set up so (switching
#: session_replication_role back and forth would empty every session's plan cache each time);
#: the others share the engine's session (plan_cache_mode force_generic_plan, set in handle).
_SESSION = {
    "custom_plan": "SET plan_cache_mode = auto",
    "no_fk": "SET session_replication_role = replica",
}


def _params(run_id: str, token: str, i: int, *, prev: bool) -> dict[str, Any]:
    now = timezone.now()
    return {
        "run_id": run_id, "token": token, "step_id": f"s{i}", "input_hash": "0" * 64,
        "status": "succeeded", "result": f'{{"i": {i}}}', "attempt": 1, "effect_key": None,
        "now": now, "kind": "read", "tool": "bench-read", "seq": i + 1,
        "inputs": f'{{"i": {i}}}', "inputs_truncated": False, "error": "", "errors": "[]",
        "finished_at": now, "expires_at": None, "model_id": "", "prompt_hash": "",
        "prev_step_id": f"s{i - 1}" if prev and i else None, "abandon": [],
        "next_step_id": None,
    }  # fmt: skip


PY_VARIANTS = (
    "py_engine", "py_no_orjson", "py_no_direct_clock", "py_named", "py_before",
    "py_engine_effect", "py_before_effect",
)  # fmt: skip
_UNDONE = {
    "py_no_orjson": ("orjson",),
    "py_no_direct_clock": ("clock",),
    "py_named": ("named",),
    "py_before": ("orjson", "clock", "named"),
    "py_before_effect": ("orjson", "clock", "named"),
}


@contextlib.contextmanager
def _python_levers(variant: str) -> Iterator[None]:
    """The step write with the levers of ``variant`` undone (``_UNDONE``), as before them."""
    undone = _UNDONE.get(variant, ())
    saved_statements = {n: getattr(sql, n) for n in _STATEMENTS}
    saved_cursor, saved_direct = sql._server_cursor_class, live._direct
    saved_prepared = sql._prepared_cursor_class
    if "orjson" in undone:
        canonical.USE_ORJSON = False
    if "clock" in undone:
        live._direct = lambda clock: clock
    if "named" in undone:
        for name in _STATEMENTS:
            named = getattr(sql, name).named
            setattr(sql, name, sql._Statement(named=named, sql=named, order=lambda p: p))
        sql._server_cursor_class = lambda: psycopg.Cursor  # type: ignore[assignment]
        sql._prepared_cursor_class = _named_prepared_cursor_class  # type: ignore[assignment]
    # the kept cursor is made again with the class of the variant
    connections[DEFAULT_DB_ALIAS].__dict__.pop("_runledger_cursor", None)
    try:
        yield
    finally:
        canonical.USE_ORJSON = True
        live._direct = saved_direct
        sql._server_cursor_class = saved_cursor
        sql._prepared_cursor_class = saved_prepared
        for name, statement in saved_statements.items():
            setattr(sql, name, statement)
        connections[DEFAULT_DB_ALIAS].__dict__.pop("_runledger_cursor", None)


def _named_prepared_cursor_class() -> type:
    """The wrapped path's cursor before the positional statements: named parameters."""
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparedCursor(ServerBindingCursor):  # type: ignore[misc,valid-type]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            return super().execute(query, params, prepare=True)  # type: ignore[misc]

    return PreparedCursor


_STATEMENTS = (
    "_PG_STEP_EXCLUSIVE", "_PG_STEP_LINK", "_PG_STEP_ALONE", "_PG_UPDATE_STATEMENT",
    "_PG_BATCH_STATEMENT",
)  # fmt: skip


#: The parameters of a succeeded first attempt of a read step that are the same at every step.
_PLAIN_READ = {
    "status": "'succeeded'", "effect_key": "NULL", "error": "''", "errors": "'[]'",
    "expires_at": "NULL", "model_id": "''", "prompt_hash": "''", "inputs_truncated": "false",
    "next_step_id": "NULL", "finished_at": "%(now)s", "attempt": "1",
}  # fmt: skip


def _micro() -> dict[str, tuple[float, str]]:
    """Each Python lever alone, without the database: µs per read step, best of 40 batches."""
    from psycopg._queries import PostgresQuery, PostgresRawQuery
    from psycopg.adapt import Transformer

    tx = Transformer(connection.connection)
    named, raw = PostgresQuery(tx), PostgresRawQuery(tx)
    link = sql._PG_STEP_LINK
    plain_sql = link.named
    for name, constant in _PLAIN_READ.items():
        plain_sql = plain_sql.replace(f"%({name})s", constant)
    plain = sql._positional(plain_sql)
    params = _params("r", "t", 7, prev=True)
    ordered = link.order(params)
    inputs, result = {"i": 7, "query": "refund for cus_0042"}, {"i": 7, "rows": [1, 2.5, "x"]}

    def text_and_hash(use_orjson: bool) -> Callable[[], Any]:
        def one() -> Any:
            canonical.USE_ORJSON = use_orjson
            try:
                canonical.canonical_hashed(inputs, step_id="s")
                return canonical.canonical(result, step_id="s")
            finally:
                canonical.USE_ORJSON = True

        return one

    direct = live._direct(timezone.now)
    cases: dict[str, Callable[[], Any]] = {
        "micro_canonical_json": text_and_hash(False),
        "micro_canonical_orjson": text_and_hash(True),
        "micro_clock_django": lambda: (timezone.now(), timezone.now()),
        "micro_clock_direct": lambda: (direct(), direct()),
        "micro_bind_named": lambda: named.convert(link.named, params),
        "micro_bind_positional": lambda: raw.convert(link.sql, link.order(params)),
        "micro_bind_positional_ordered_only": lambda: raw.convert(link.sql, ordered),
        "micro_setting_lookup": lambda: conf.RUNLEDGER_PG_PREPARE,
        # Not made: the plain read step's statement with its constant parameters inlined
        # (11 bound instead of 22), and the thread's Django connection kept by the engine.
        "micro_bind_plain_statement": lambda: raw.convert(plain.sql, plain.order(params)),
        "micro_connection_lookup": lambda: connections[DEFAULT_DB_ALIAS],
    }
    figures = {}
    for name, case in cases.items():
        best = min(timeit.repeat(case, number=200, repeat=40)) / 200 * 1e6
        figures[name] = (best, "us per step")
    return figures


@contextlib.contextmanager
def _without_seq_index() -> Iterator[None]:
    """Drop the (run_id, seq) index for a while (the timeline's and the history's order)."""
    connection.connection.execute("DROP INDEX step_run_seq")
    try:
        yield
    finally:
        connection.connection.execute("CREATE INDEX step_run_seq ON ledger_step (run_id, seq)")


@contextlib.contextmanager
def _with_dropped_indexes() -> Iterator[None]:
    """Put back for a while the two run_id indexes that migration 0006 dropped."""
    for statement in _DROPPED:
        connection.connection.execute(statement)
    try:
        yield
    finally:
        connection.connection.execute(
            'DROP INDEX "ledger_step_run_id_9b3bd036", "ledger_step_run_id_9b3bd036_like"'
        )
