"""``manage.py seed_bulk --runs 100000 --steps 1000000``: a large ledger for measuring pages.

One long run (``--big-steps``, default 10,000 steps) is executed by the real engine (the example
``survey`` agent), so its ledger, hashes and chain are exactly what a worker writes and a dry
replay of it walks every step. The other runs and steps are synthetic rows in the same shape
(chained by next_step_id, hashed canonical inputs, a realistic mix of statuses and reasons),
written with COPY on PostgreSQL (executemany on SQLite), then the tables are analysed.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import canonical
from ledger.models import Run
from ledger.processes import execute
from ledger.transitions.counts import fold_status_counts
from ledger.transitions.search import fold_search_words
from ledger.transitions.trends import fold_trends

RUN_COLUMNS = (
    "run_id", "agent", "inputs", "status", "reason", "blocked_step_id", "detail", "result",
    "error", "plan_version", "tool_schema_hash", "code_version", "resume_count", "max_resumes",
    "executions", "lease_owner", "lease_token", "lease_expires_at", "heartbeat_at", "parent_id",
    "parent_kind", "forked_from_step_id", "created_at", "updated_at", "status_changed_at",
    "started_at", "finished_at", "title", "labels", "search_steps",
)  # fmt: skip
STEP_COLUMNS = (
    "run_id", "step_id", "input_hash", "status", "result", "next_step_id", "attempt",
    "effect_key", "updated_at", "kind", "tool", "seq", "inputs", "inputs_truncated", "error",
    "errors", "started_at", "finished_at", "expires_at", "model_id", "prompt_hash", "settled_by",
)  # fmt: skip

STATUSES = [
    ("succeeded", 80.0), ("failed", 5.0), ("cancelled", 3.0), ("needs_attention", 8.0),
    ("running", 2.5), ("queued", 1.5),
]  # fmt: skip
REASONS = [
    ("reconciliation", 35), ("stale", 25), ("divergence", 15), ("budget", 15),
    ("agent_missing", 10),
]  # fmt: skip
AGENTS = ["refund", "survey", "triage", "enrich", "retired-agent"]
TOOLS = [
    ("read", "fetch_invoice"), ("clock", "now"), ("model", "model"), ("read", "lookup_record"),
    ("effect", "refund_charge"), ("effect", "send_email"), ("read", "search_docs"),
]  # fmt: skip


def _title(i: int) -> tuple[str, str]:
    """A title and labels as an agent declares them: 5,000 customers, 20 runs each."""
    customer, invoice = f"cus_{i % 5000:04d}", f"inv_{i:06d}"
    title = f"Refund invoice {invoice} for {customer}"
    return title, json.dumps({"customer": customer, "invoice_id": invoice})


def _pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


class Command(BaseCommand):
    help = "Generate many runs and steps (one long real run plus synthetic ones) for benchmarks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=100_000)
        parser.add_argument("--steps", type=int, default=1_000_000)
        parser.add_argument("--big-steps", type=int, default=10_000)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--audit", type=int, default=100_000, help="synthetic audit events (the audit page)"
        )
        parser.add_argument(
            "--append", action="store_true", help="add to a database that already has runs"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        runs, steps, big = options["runs"], options["steps"], options["big_steps"]
        if runs < 2 or steps < big + runs - 1 or big < 12:
            raise CommandError("need at least 2 runs, --big-steps >= 12 and a step per run")
        if Run.objects.exists() and not options["append"]:
            raise CommandError(
                "this database already has runs; seed an empty one (or pass --append)"
            )
        t0 = time.monotonic()
        big_run = self._big_run(big)
        self.stdout.write(f"long run {big_run} ({big} steps) in {time.monotonic() - t0:.1f} s")
        t1 = time.monotonic()
        rng = random.Random(options["seed"])
        now = timezone.now()
        written = self._bulk(rng, now, runs - 1, steps - big)
        self.stdout.write(
            f"{runs - 1} runs and {written} steps written in {time.monotonic() - t1:.1f} s"
        )
        t2 = time.monotonic()
        events = self._audit(rng, now, options["audit"])
        self.stdout.write(f"{events} audit events written in {time.monotonic() - t2:.1f} s")
        fold_status_counts()  # the COPY's deltas into the status totals, as the sweep would
        fold_trends()  # and into the Trends page's hourly totals
        # The steps' words the triggers appended (the COPY's runs already hold theirs).
        fold_search_words(passes=10**6)
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("VACUUM ANALYZE ledger_run")
                cur.execute("VACUUM ANALYZE ledger_step")
                cur.execute("VACUUM ANALYZE ledger_auditevent")
        self.stdout.write(f"long run: {big_run}")

    def _big_run(self, steps: int) -> str:
        """A survey run of exactly ``steps`` rows, executed by the engine."""
        records = (steps - 1) * 10 // 11
        while records + records // 10 + 1 < steps:
            records += 1
        run = start_unannounced(agent="survey", inputs={"records": records})
        # With the heartbeat a worker runs: on a busy machine the 10,000 steps take longer than
        # a lease, and without renewals the execution stops half way.
        outcome = execute.run_execute(run_id=run.run_id, worker="seed-bulk", heartbeat=True)
        if outcome is None or outcome.status != "succeeded":
            raise CommandError(f"the long run did not succeed: {outcome}")
        return run.run_id

    def _audit(self, rng: random.Random, now: datetime, n: int) -> int:
        run_ids = list(Run.objects.values_list("run_id", flat=True)[:20_000])
        rows = list(_audit_rows(rng, now, n, run_ids))
        for start in range(0, len(rows), 20_000):
            with transaction.atomic():
                _copy("ledger_auditevent", AUDIT_COLUMNS, rows[start : start + 20_000])
        return len(rows)

    def _bulk(self, rng: random.Random, now: datetime, runs: int, steps: int) -> int:
        per_run, extra = divmod(steps, runs)
        ids: list[str] = []
        return copy_runs(
            self._one_run(rng, now, i, per_run + (1 if i < extra else 0), ids) for i in range(runs)
        )

    def _one_run(
        self, rng: random.Random, now: datetime, i: int, count: int, ids: list[str]
    ) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
        run_id = f"run_{rng.getrandbits(80):020x}"
        status = _pick(rng, STATUSES)
        reason = _pick(rng, REASONS) if status == "needs_attention" else ""
        agent = "retired-agent" if reason == "agent_missing" else rng.choice(AGENTS[:4])
        created = now - timedelta(seconds=rng.uniform(60, 30 * 86400))
        started = created + timedelta(seconds=rng.uniform(0, 30))
        changed = started + timedelta(seconds=rng.uniform(1, 600))
        changed = min(changed, now)
        step_rows, last_step = _steps(rng, run_id, count, started, status, reason)
        lease = status == "running"
        expired = lease and rng.random() < 0.5
        lease_until = (now - timedelta(seconds=90)) if expired else now + timedelta(seconds=25)
        parent = rng.choice(ids) if ids and rng.random() < 0.01 else None
        ids.append(run_id)
        if len(ids) > 1000:
            del ids[:500]
        resumes = rng.randint(0, 3) if status != "queued" else 0
        budget = 10 if reason != "budget" else resumes
        run_row = (
            run_id, agent, json.dumps({"batch": i}), status, reason,
            last_step if status == "needs_attention" else "",
            f"blocked: {reason}" if reason else "",
            json.dumps({"ok": True}) if status == "succeeded" else None,
            "StepFailed: gave up" if status == "failed" else "",
            "1", "0" * 64, "", resumes, budget, resumes + 1,
            f"worker-{i % 7}" if lease else "", f"tok{i}" if lease else None,
            lease_until if lease else None, lease_until - timedelta(seconds=30) if lease else None,
            parent, rng.choice(["fork", "continue"]) if parent else "", "",
            created, changed, changed, started,
            changed if status in ("succeeded", "failed", "cancelled") else None,
            *_title(i), _search_steps(step_rows),
        )  # fmt: skip
        return run_row, step_rows


def _search_steps(step_rows: list[tuple[Any, ...]]) -> str:
    """``Run.search_steps`` as the triggers of migration 0018 and the sweep's fold write it for
    these steps (the words the triggers append during the COPY are found there by the fold)."""
    words = [
        f" {row[1]} {row[7] or ''} {row[14][:200]}"
        for row in step_rows
        if row[9] == "effect" or row[14]
    ]
    return "".join(words)[:4000]


def _steps(
    rng: random.Random, run_id: str, count: int, started: datetime, status: str, reason: str
) -> tuple[list[tuple[Any, ...]], str]:
    rows = []
    at = started
    names = [f"s{n}.{TOOLS[(n + len(run_id)) % len(TOOLS)][1]}" for n in range(count)]
    for n in range(count):
        kind, tool = TOOLS[(n + len(run_id)) % len(TOOLS)]
        inputs = {"n": n, "run": run_id[-6:], "q": f"query {n}"}
        text = canonical.dumps(inputs)
        last = n == count - 1
        step_status = "succeeded"
        if last and status == "failed":
            step_status = "failed"
        elif last and (reason == "reconciliation" or status == "running"):
            step_status = "started"
        done = at + timedelta(milliseconds=rng.randint(2, 900))
        result = None if step_status != "succeeded" else json.dumps({"n": n, "value": n * 7})
        errors = (
            json.dumps([{"attempt": 1, "error": "TimeoutError: upstream", "at": at.isoformat()}])
            if step_status == "failed"
            else "[]"
        )
        row = (
            run_id, names[n], canonical.hash_text(text), step_status, result,
            names[n + 1] if not last else None, 1,
            f"{run_id}:{names[n]}" if kind == "effect" else None,
            done, kind, tool, n + 1, text, False, "", errors, at,
            done if step_status != "started" else None, None,
            "scripted:summarize" if kind == "model" else "", "", "",
        )  # fmt: skip
        rows.append(row)
        at = done
    return rows, names[-1] if names else ""


AUDIT_COLUMNS = ("actor", "at", "action", "run_id", "step_id", "before", "after", "reason")
AUDIT_ACTIONS = ["run_resume", "run_cancel", "settlement_propose", "settlement_approve",
                 "reconcile_lookup", "stale_accept", "run_retry"]  # fmt: skip
ACTORS = ["olive", "oscar", "amy", "abe", "root"]


def _audit_rows(rng: random.Random, now: datetime, n: int, run_ids: list[str]) -> Iterator[Any]:
    """Audit events spread over the last 90 days, actors, actions and runs (synthetic)."""
    for i in range(n):
        action = AUDIT_ACTIONS[i % len(AUDIT_ACTIONS)]
        before = json.dumps({"status": "needs_attention", "version": 3})
        after = json.dumps({"status": "queued", "version": 4})
        yield (
            ACTORS[rng.randrange(len(ACTORS))], now - timedelta(seconds=rng.uniform(0, 90 * 86400)),
            action, run_ids[rng.randrange(len(run_ids))], "", before, after, f"bench event {i}",
        )  # fmt: skip


def copy_runs(runs: Iterable[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]) -> int:
    """Write (run row, its step rows) pairs with COPY, 5,000 runs a transaction; the steps
    written."""
    written = 0
    batch: list[tuple[Any, ...]] = []
    step_batch: list[tuple[Any, ...]] = []
    for run_row, step_rows in runs:
        batch.append(run_row)
        step_batch.extend(step_rows)
        if len(batch) >= 5000:
            written += _copy_batch(batch, step_batch)
            batch, step_batch = [], []
    return written + _copy_batch(batch, step_batch)


def _copy_batch(runs: list[tuple[Any, ...]], steps: list[tuple[Any, ...]]) -> int:
    with transaction.atomic():
        _copy("ledger_run", RUN_COLUMNS, runs)
        _copy("ledger_step", STEP_COLUMNS, steps)
    return len(steps)


def _copy(table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    cols = ", ".join(columns)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            raw = cur.cursor  # the psycopg cursor under Django's wrapper
            with raw.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        marks = ", ".join(["%s"] * len(columns))
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(_adapt(rows)))


def _adapt(rows: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    for row in rows:
        yield tuple(
            connection.ops.adapt_datetimefield_value(v) if isinstance(v, datetime) else v
            for v in row
        )
