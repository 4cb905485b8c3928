"""Measure the engine's write path against the floor and the peers: `make bench`.

Alternating rounds in one process run, so that the machine's drift hits every figure alike:
each round measures the floor (one INSERT+COMMIT on the same database), one agent run per step
kind (read, model, clock, effect), and — with ``--peers PYTHON`` — DBOS and LangGraph through
``harness/bench/peers.py --serve`` running in that interpreter (their own virtualenv). A ratio is
taken within a round and the median of the rounds is reported. Then, once: round trips per step,
the same write through the Django ORM, a recorded ``--resume-steps`` run resumed in a fresh
worker process (time, ledger queries, peak RSS), and steps/s of 1 run against
``--concurrent`` runs at once. Prints one ``name: value unit`` line per figure and, with
``--json``, writes them to a file (a second database's figures go beside the first's).
Runs it creates are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from harness.bench.agents import bench_agent, durations
from harness.bench.results import merge_json
from harness.unannounced import start_unannounced
from ledger import canonical, transitions
from ledger.models import Run, Step
from ledger.processes import execute

KINDS = ("read", "model", "clock", "effect", "batched")
PEERS = ("dbos", "langgraph-sync", "langgraph-exit")
PEERS_SCRIPT = Path(settings.BASE_DIR) / "harness" / "bench" / "peers.py"


class Figures:
    """``name: value unit`` lines, printed as they come and kept for the JSON file."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.values: dict[str, dict[str, Any]] = {}

    def add(self, name: str, value: float | None, unit: str, **extra: Any) -> None:
        shown = "not measured" if value is None else f"{value:.3f}"
        note = f"  # {extra['note']}" if "note" in extra else ""
        self.out.write(f"{name}: {shown} {unit}{note}")
        self.values[name] = {"value": value, "unit": unit, **extra}


class Command(BaseCommand):
    help = "Benchmark the engine's step writes, resume and concurrency against the floor and peers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
        parser.add_argument("--steps", type=int, default=300, help="steps per measured run")
        parser.add_argument("--peers", default="", help="python of the peers' virtualenv")
        parser.add_argument("--peer-steps", type=int, default=1000)
        parser.add_argument("--resume-steps", type=int, default=10000)
        parser.add_argument("--concurrent", type=int, default=8)
        parser.add_argument("--concurrent-steps", type=int, default=1000, help="steps per run")
        parser.add_argument("--json", default="", help="write the figures to this file")
        parser.add_argument("--profile", default="", help="write a pyinstrument profile here")
        parser.add_argument("--resume-only", default="", help=argparse.SUPPRESS)
        parser.add_argument("--execute-only", default="", help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["resume_only"]:
            self._resume_child(options["resume_only"], options["resume_steps"])
            return
        if options["execute_only"]:
            self._execute_child(options["execute_only"], options["steps"])
            return
        call_command("migrate", verbosity=0)
        vendor = connection.vendor
        figures = Figures(self.stdout)
        self.stdout.write(f"# database: {vendor}; machine: {os.cpu_count()} cores, "
                          f"load {os.getloadavg()[0]:.1f} (shared: figures are noisy)")  # fmt: skip
        self._created: list[str] = []
        try:
            self._rounds(figures, options)
            self._once(figures, options)
        finally:
            Step.objects.filter(run_id__in=self._created).delete()
            Run.objects.filter(run_id__in=self._created).delete()
        if options["json"]:
            merge_json(Path(options["json"]), vendor, figures.values)
            self.stdout.write(f"# written to {options['json']} under {vendor!r}")

    # --- alternating rounds ---------------------------------------------------------------

    def _rounds(self, figures: Figures, options: dict[str, Any]) -> None:
        steps, rounds = options["steps"], options["rounds"]
        peers = _PeerProcess(options["peers"]) if options["peers"] else None
        per_round: list[dict[str, float]] = []
        self._cpu: dict[str, list[float]] = {}
        try:
            for _ in range(rounds):
                one = {"floor": self._floor(steps)}
                for kind in KINDS:
                    one[kind] = self._kind(kind, steps)
                if peers is not None:
                    for name in PEERS:
                        one[name] = peers.ask(name, options["peer_steps"])
                per_round.append(one)
        finally:
            if peers is not None:
                peers.close()
        med = _median_of(per_round)
        figures.add("floor_insert_commit", med("floor"), "ms", rounds=rounds)
        for kind in KINDS:
            figures.add(f"{kind}_step", med(kind), "ms")
        for kind in KINDS:  # this process's CPU per step (Python, psycopg), whole run / steps
            goal = {"goal": "<= 0.060"} if kind == "read" else {}  # issue 22, item 3
            figures.add(f"{kind}_step_cpu", statistics.median(self._cpu[kind]), "ms", **goal)
        figures.add("floor_cpu", statistics.median(self._cpu["floor"]), "ms")
        figures.add("per_step_vs_floor", med("read", "floor"), "x", goal="<= 1.7")
        figures.add("model_vs_floor", med("model", "floor"), "x", goal="<= 1.5")
        figures.add("clock_vs_floor", med("clock", "floor"), "x", goal="<= 1.5")
        figures.add("effect_vs_floor", med("effect", "floor"), "x", goal="<= 3.5")
        figures.add("batched_vs_floor", med("batched", "floor"), "x", goal="<= 0.1")
        if peers is not None:
            for name in PEERS:
                figures.add(f"{name.replace('-', '_')}_step", med(name), "ms")
            figures.add("dbos_over_runledger", med("dbos", "read"), "x", goal=">= 6")
            figures.add("langgraph_over_runledger", med("langgraph-sync", "read"), "x", goal=">= 4")
            figures.add("langgraph_exit_over_runledger", med("langgraph-exit", "read"), "x")
            self.stdout.write(f"# peers: {json.dumps(peers.versions)}")
        figures.values["rounds"] = {"value": per_round, "unit": "ms per step, per round"}

    def _floor(self, n: int) -> float:
        """Median ms of one INSERT+COMMIT (autocommit) on the ledger's own connection."""
        with connection.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS bench_floor (id integer, note text)")
            samples = []
            cpu = time.process_time()
            for i in range(n):
                t = time.perf_counter()
                cur.execute("INSERT INTO bench_floor VALUES (%s, %s)", [i, "x"])
                samples.append(time.perf_counter() - t)
            self._cpu.setdefault("floor", []).append((time.process_time() - cpu) / n * 1000)
            cur.execute("DROP TABLE bench_floor")
        return statistics.median(samples) * 1000

    def _kind(self, kind: str, steps: int) -> float:
        """Median ms of one ctx call of this kind in a fresh run of ``steps`` calls. Batched
        steps: the mean, which spreads each batch's commit over the steps it carries."""
        cpu = time.process_time()
        name = self._execute(kind, steps)
        self._cpu.setdefault(kind, []).append((time.process_time() - cpu) / steps * 1000)
        if kind == "batched":
            return statistics.fmean(durations[name]) * 1000
        return statistics.median(durations[name]) * 1000

    def _execute(self, kind: str, steps: int, name: str | None = None) -> str:
        name = bench_agent(kind, steps, name)
        run = start_unannounced(agent=name, inputs={})
        self._created.append(run.run_id)
        outcome = execute.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
        assert outcome is not None and outcome.status == "succeeded", outcome
        return name

    # --- measured once ----------------------------------------------------------------------

    def _once(self, figures: Figures, options: dict[str, Any]) -> None:
        steps = options["steps"]
        for kind in ("read", "effect"):
            trips = (self._queries(kind, steps) - self._queries(kind, 0)) / steps
            figures.add(f"{kind}_round_trips", trips, "per step")
        figures.add("orm_fenced_write", self._orm_write(steps), "ms")
        self._resume(figures, options["resume_steps"])
        runs = options["concurrent"]
        if runs > 1:
            self._concurrency(figures, steps=options["concurrent_steps"], runs=runs)
        if options["profile"]:
            self._profile(options["profile"], steps)

    def _queries(self, kind: str, steps: int) -> int:
        """Statements of one whole execution (claim, load, steps, finish)."""
        name = bench_agent(kind, steps, f"bench-count-{kind}-{steps}")
        run = start_unannounced(agent=name, inputs={})
        self._created.append(run.run_id)
        with CaptureQueriesContext(connection) as queries:
            execute.run_execute(run_id=run.run_id, worker="bench", heartbeat=False)
        return len(queries)

    def _orm_write(self, n: int) -> float:
        """The same fenced read-step write through the Django ORM, for comparison."""
        run = start_unannounced(agent=bench_agent("read", 0, "bench-orm"), inputs={})
        self._created.append(run.run_id)
        token = transitions.lease_claim(run_id=run.run_id, owner="bench")
        samples = []
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
                    run_id=run.run_id, step_id=f"s{i}", input_hash="0" * 64,
                    status="succeeded", result={"i": i}, kind="read", tool="bench-read",
                    seq=i + 1, inputs={"i": i}, updated_at=now, started_at=now, finished_at=now,
                )  # fmt: skip
            samples.append(time.perf_counter() - t)
        return statistics.median(samples) * 1000

    def _resume(self, figures: Figures, steps: int) -> None:
        """A recorded ``steps``-step run, resumed in a fresh worker process."""
        t = time.perf_counter()
        run_id = self._recorded_run(steps)
        figures.add(f"seed_{steps}_steps", time.perf_counter() - t, "s")
        child = subprocess.run(
            [sys.executable, sys.argv[0], "bench_engine", "--resume-only", run_id,
             "--resume-steps", str(steps)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        answer = json.loads(child.stdout.strip().splitlines()[-1])
        figures.add(f"resume_{steps}_steps", answer["seconds"], "s", goal="<= 0.5")
        # On a shared machine the wall time waits for a core; the CPU time is the resume's own.
        figures.add(f"resume_{steps}_steps_cpu", answer["cpu_seconds"], "s")
        figures.add("resume_ledger_queries", answer["ledger_queries"], "queries", goal="1")
        figures.add("resume_queries", answer["queries"], "queries")
        figures.add("resume_worker_peak_rss", answer["peak_rss_mb"], "MB")
        figures.add("resume_worker_rss_before", answer["rss_before_mb"], "MB")

    def _recorded_run(self, steps: int) -> str:
        """A failed run of ``steps`` succeeded read steps, resumable, as the engine records it.

        Its first 10 steps are written by the engine; the rest are copied in bulk with the
        same inputs hashing and linking (recording 10,000 steps one commit at a time would take
        most of the bench's time on a busy machine). The resume checks the copy: it asserts
        that every step replays, which a wrong hash or link would break.
        """
        head = min(steps, 10)
        self._execute("read", head, "bench-resume")
        run_id = self._created[-1]
        model = Step.objects.get(run_id=run_id, step_id="s0")
        Step.objects.filter(run_id=run_id, step_id=f"s{head - 1}").update(next_step_id=f"s{head}")
        now = timezone.now()
        rows = []
        for i in range(head, steps):
            data, text = canonical.canonical({"i": i}, step_id=f"s{i}")
            row = Step(
                run_id=run_id, step_id=f"s{i}", input_hash=canonical.hash_text(text),
                status="succeeded", result={"i": i}, kind="read", tool=model.tool,
                seq=i + 1, inputs=data, updated_at=now, started_at=now, finished_at=now,
                next_step_id=f"s{i + 1}" if i + 1 < steps else None,
            )  # fmt: skip
            rows.append(row)
        Step.objects.bulk_create(rows, batch_size=2000)
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(
            run_id=run_id, by="bench", reason="bench", seen_version=None, anyway=True
        )
        return run_id

    def _resume_child(self, run_id: str, steps: int) -> None:
        """In a fresh process: the worker's resume of a recorded run, as one JSON line."""
        bench_agent("read", steps, "bench-resume")
        connection.ensure_connection()
        before = _peak_rss_mb()
        with CaptureQueriesContext(connection) as queries:
            t, cpu = time.perf_counter(), time.process_time()
            outcome = execute.run_execute(run_id=run_id, worker="bench", heartbeat=False)
            elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
        assert outcome is not None and outcome.replayed == steps and outcome.executed == 0
        ledger = [q for q in queries if re.search(r'FROM\s+"?ledger_step\b', q["sql"])]
        answer = {"seconds": elapsed, "cpu_seconds": cpu, "queries": len(queries),
                  "ledger_queries": len(ledger),
                  "peak_rss_mb": _peak_rss_mb(), "rss_before_mb": before}  # fmt: skip
        self.stdout.write(json.dumps(answer))

    def _concurrency(self, figures: Figures, *, steps: int, runs: int) -> None:
        """Steps/s of one run alone, then of ``runs`` runs at once, each in its own worker
        process as a prefork worker's children run them (threads would share one GIL)."""
        one = self._steps_per_second(steps, 1)
        many = self._steps_per_second(steps, runs)
        figures.add("steps_per_s_1_run", one, "steps/s")
        figures.add(f"steps_per_s_{runs}_runs", many, "steps/s")
        figures.add("concurrent_speedup", many / one, "x", goal=">= 3")

    def _steps_per_second(self, steps: int, runs: int) -> float:
        """``runs`` runs of ``steps`` read steps in as many processes, started together once
        every process is set up; steps/s from the first start to the last finish."""
        ids = [
            start_unannounced(agent=bench_agent("read", steps, "bench-conc"), inputs={}).run_id
            for _ in range(runs)
        ]
        self._created.extend(ids)
        children = [self._child(run_id, steps) for run_id in ids]
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        spans = []
        for child in children:
            out, _ = child.communicate(timeout=600)
            spans.append(json.loads(out.strip().splitlines()[-1]))
        done = Run.objects.filter(run_id__in=ids, status="succeeded").count()
        assert done == runs, f"{runs - done} concurrent runs did not succeed"
        elapsed = max(s["end"] for s in spans) - min(s["start"] for s in spans)
        return steps * runs / elapsed

    def _child(self, run_id: str, steps: int) -> subprocess.Popen[str]:
        command = [sys.executable, sys.argv[0], "bench_engine", "--execute-only", run_id]
        return subprocess.Popen(
            [*command, "--steps", str(steps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _execute_child(self, run_id: str, steps: int) -> None:
        """In a worker process of its own: set up, wait for the word, execute one run."""
        bench_agent("read", steps, "bench-conc")
        connection.ensure_connection()
        self.stdout.write("ready")
        self.stdout.flush()
        sys.stdin.readline()
        start = time.monotonic()  # system-wide: comparable between the processes
        outcome = execute.run_execute(run_id=run_id, worker=f"bench-{os.getpid()}", heartbeat=False)
        end = time.monotonic()
        assert outcome is not None and outcome.status == "succeeded", outcome
        self.stdout.write(json.dumps({"start": start, "end": end}))

    def _profile(self, path: str, steps: int) -> None:
        from pyinstrument import Profiler  # the dev extra installs it

        profiler = Profiler(interval=0.0005)
        with profiler:
            self._execute("read", steps, "bench-profile")
        Path(path).write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        self.stdout.write(f"# profile of {steps} read steps written to {path}")


class _PeerProcess:
    """``harness/bench/peers.py --serve`` in the peers' interpreter, asked one figure at a time."""

    def __init__(self, python: str) -> None:
        url = _database_url()
        self.proc = subprocess.Popen(
            [python, str(PEERS_SCRIPT), "--serve", url],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.versions = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the peers' process ended (is .venv-peers installed?)")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, name: str, steps: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{name} {steps}\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise RuntimeError(f"peer {name} did not run: {answer['error']}")
        return float(answer["ms_per_step"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _median_of(rounds: list[dict[str, float]]) -> Any:
    def med(name: str, over: str | None = None) -> float:
        if over is None:
            return statistics.median(r[name] for r in rounds)
        return statistics.median(r[name] / r[over] for r in rounds)

    return med


def _peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM: since its exec, unlike ru_maxrss, which
    keeps the forking parent's peak)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _database_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        raise RuntimeError("--peers needs DATABASE_URL pointing at PostgreSQL")
    return url
