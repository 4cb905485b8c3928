"""Measure the engine's write path against the floor: `make bench` (or `manage.py bench_engine`).

Prints, for each step kind, the median time per step and the database round trips per step,
beside one INSERT+COMMIT on the same database (the floor) and the same fenced write through the
Django ORM (what the engine would cost without hand-written SQL); then the time and query count
of a resume that replays a 1,000-step run. Runs it creates are deleted afterwards.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import llm, registry, transitions, worker
from ledger.agents import agent, tool
from ledger.models import Run, Step


@tool(kind="read", name="bench-read")
def _read(i: int) -> dict[str, int]:
    return {"i": i}


@tool(kind="effect", name="bench-effect")
def _effect(i: int, *, idempotency_key: str) -> dict[str, Any]:
    return {"i": i, "key": idempotency_key}


@llm.script("bench")
def _model(prompt: str, system: str) -> dict[str, str]:
    return {"text": prompt[::-1]}


_durations: list[float] = []
COUNTS = ("read-count", "model-count", "clock-count", "effect-count")


def _bench_agent(kind: str, steps: int) -> str:
    name = f"bench-{kind}"

    @agent(name, tools=[_read, _effect])
    def body(ctx: Any, inputs: Any) -> int:
        for i in range(steps):
            started = time.perf_counter()
            if kind.startswith("read"):
                ctx.call(_read, step=f"s{i}", i=i)
            elif kind.startswith("effect"):
                ctx.call(_effect, step=f"s{i}", i=i)
            elif kind.startswith("model"):
                ctx.model(f"prompt {i}", model="scripted:bench", step=f"s{i}")
            else:
                ctx.now(step=f"s{i}")
            _durations.append(time.perf_counter() - started)
        return steps

    return name


class Command(BaseCommand):
    help = "Benchmark the engine's step writes and resume against one INSERT+COMMIT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--steps", type=int, default=500, help="steps per measured run")
        parser.add_argument("--resume-steps", type=int, default=1000)

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        steps = options["steps"]
        vendor = connection.vendor
        self.stdout.write(f"database: {vendor} {connection.settings_dict.get('NAME')}")
        floor = self._floor(steps * 2)
        self.stdout.write(f"floor: one INSERT+COMMIT          {floor * 1000:7.3f} ms  1 round trip")
        orm = self._orm_write(steps)
        self.stdout.write(
            f"ORM fenced read-step write          {orm * 1000:7.3f} ms  ({orm / floor:4.1f}x floor)"
        )
        unit = "round trips" if vendor == "postgresql" else "statements"
        created: list[str] = []
        try:
            for kind in ("read", "model", "clock", "effect"):
                per_step, trips, run_id = self._kind(kind, steps)
                created.append(run_id)
                self.stdout.write(
                    f"engine {kind:<6} step                 {per_step * 1000:7.3f} ms  "
                    f"{trips:4.2f} {unit}/step  ({per_step / floor:4.1f}x floor)"
                )
            elapsed, queries, run_id = self._resume(options["resume_steps"])
            created.append(run_id)
            self.stdout.write(
                f"resume replaying {options['resume_steps']} steps        "
                f"{elapsed * 1000:7.1f} ms  {queries} queries in all"
            )
        finally:
            Step.objects.filter(run_id__in=created).delete()
            Run.objects.filter(run_id__in=created).delete()
            for kind in ("read", "model", "clock", "effect", "resume", "empty", *COUNTS):
                registry.unregister_agent(f"bench-{kind}")

    def _floor(self, n: int) -> float:
        with connection.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS bench_floor (id integer, note text)")
            samples = []
            for i in range(n):
                t = time.perf_counter()
                cur.execute("INSERT INTO bench_floor VALUES (%s, %s)", [i, "x"])
                samples.append(time.perf_counter() - t)
            cur.execute("DROP TABLE bench_floor")
        return statistics.median(samples)

    def _orm_write(self, n: int) -> float:
        run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
        token = transitions.lease_claim(run_id=run.run_id, owner="bench")
        samples = []
        try:
            for i in range(n):
                t = time.perf_counter()
                with transaction.atomic():
                    locked = Run.objects.select_for_update(of=("self",)).filter(
                        pk=run.run_id, lease_token=token
                    )
                    if not locked.exists():
                        raise RuntimeError("lease lost")
                    if i:
                        Step.objects.filter(run_id=run.run_id, step_id=f"s{i - 1}").update(
                            next_step_id=f"s{i}"
                        )
                    now = timezone.now()
                    Step.objects.create(
                        run_id=run.run_id,
                        step_id=f"s{i}",
                        input_hash="0" * 64,
                        status="succeeded",
                        result={"i": i},
                        kind="read",
                        tool="bench-read",
                        seq=i + 1,
                        inputs={"i": i},
                        updated_at=now,
                        started_at=now,
                        finished_at=now,
                    )
                samples.append(time.perf_counter() - t)
        finally:
            Step.objects.filter(run_id=run.run_id).delete()
            Run.objects.filter(pk=run.run_id).delete()
        return statistics.median(samples)

    def _kind(self, kind: str, steps: int) -> tuple[float, float, str]:
        """Median wall time of one ctx call of this kind, and round trips per step."""
        name = _bench_agent(kind, steps)
        run = transitions.run_start(agent=name, inputs={})
        _durations.clear()
        outcome = worker.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
        assert outcome is not None and outcome.status == "succeeded", outcome
        median = statistics.median(_durations)
        # Round trips are counted on a second run (capturing SQL slows the timed one), less
        # the run's fixed statements (claim, load, finish), counted on an empty run.
        return (
            median,
            (self._queries(name) - self._queries(_bench_agent("empty", 0))) / steps,
            run.run_id,
        )

    def _queries(self, name: str) -> int:
        run = transitions.run_start(agent=name, inputs={})
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as queries:
            worker.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
        Step.objects.filter(run_id=run.run_id).delete()
        Run.objects.filter(pk=run.run_id).delete()
        return len(queries)

    def _resume(self, steps: int) -> tuple[float, int, str]:
        name = _bench_agent("resume", steps)
        run = transitions.run_start(agent=name, inputs={})
        worker.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(run_id=run.run_id, by="bench", reason="bench", seen_version=None)
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as queries:
            t = time.perf_counter()
            outcome = worker.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
            elapsed = time.perf_counter() - t
        assert outcome is not None and outcome.executed == 0 and outcome.replayed == steps
        return elapsed, len(queries), run.run_id
