"""Throughput with real workers: ``--runs`` runs of ``--steps`` read steps on ``--workers``
Celery worker processes, over the default (filesystem) broker and over a private Redis.

Prints, per broker, ``name: value unit`` lines: runs/s and steps/s from the first enqueue to
the last run's finish, commits/s (PostgreSQL's own count of committed transactions in the
database over the same span), p50/p99 of one step's latency (the time between two consecutive
steps' commits in a run, as the ledger recorded them), and how many runs did not succeed
(the goal: none). Needs PostgreSQL (DATABASE_URL) and RUNLEDGER_HARNESS=1.

``--ladder 1,2,4,8`` then measures, for each count, that many worker processes of one pool
child each (filesystem broker) and, right after on the same server, ``pgbench`` running the
floor's INSERT+COMMIT with the same number of clients for ``--pgbench-seconds``: the ratio of
the workers' commits/s to pgbench's transactions/s is the figure (issue 22's goal: >= 0.7).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from harness.bench import agents  # registers bench-steps here too (run_start checks it)
from harness.cluster import Cluster, wait_for
from harness.soak import broker as broker_url
from harness.unannounced import start_unannounced
from ledger.models import FINAL_STATUSES, Run, RunStatus, Step
from runs.operations.tasks import start_run

AGENTS = f"ledger.examples.agents,{agents.__name__}"


class Command(BaseCommand):
    help = "Runs/s, steps/s, commits/s and step latency with real Celery workers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1000)
        parser.add_argument("--steps", type=int, default=20)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--concurrency", type=int, default=4, help="per worker process")
        parser.add_argument("--brokers", default="filesystem,redis")
        parser.add_argument("--timeout", type=float, default=900)
        parser.add_argument("--json", default="", help="add the figures to this file")
        parser.add_argument(
            "--ladder", default="", help="worker process counts beside pgbench, e.g. 1,2,4,8"
        )
        parser.add_argument("--pgbench-seconds", type=int, default=15)

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            self.stdout.write("# bench_workers needs PostgreSQL")
            return
        figures: dict[str, Any] = {}
        for broker in [b for b in options["brokers"].split(",") if b]:
            if broker == "redis" and shutil.which("redis-server") is None:
                self.stdout.write("# redis: not measured (no redis-server on PATH)")
                continue
            figures.update(self._broker(broker, options))
        for count in [int(n) for n in options["ladder"].split(",") if n.strip()]:
            figures.update(self._rung(count, options))
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(Path(options["json"]), "postgresql_workers", figures)

    def _rung(self, count: int, options: dict[str, Any]) -> dict[str, Any]:
        """``count`` worker processes (one pool child each) then pgbench with ``count``
        clients on the same server; the ratio of commits/s."""
        self.stdout.write(f"# {count} worker processes; load {os.getloadavg()[0]:.2f}")
        ours = self._broker(
            "filesystem", {**options, "workers": count, "concurrency": 1}, label=f"p{count}"
        )
        tps = _pgbench(count, options["pgbench_seconds"])
        mine = ours[f"p{count}_commits_per_s"]["value"]
        out = {
            f"p{count}_pgbench_commits_per_s": {"value": tps, "unit": "commits/s"},
            f"p{count}_commits_ratio_to_pgbench": {"value": mine / tps if tps else None,
                                                    "unit": "ratio"},
            f"p{count}_load_average": {"value": os.getloadavg()[0], "unit": "load"},
        }  # fmt: skip
        for name, fig in out.items():
            shown = "not measured" if fig["value"] is None else f"{fig['value']:.3f}"
            self.stdout.write(f"{name}: {shown} {fig['unit']}")
        return {**ours, **out}

    def _broker(self, broker: str, options: dict[str, Any], label: str = "") -> dict[str, Any]:
        root = Path(tempfile.mkdtemp(prefix=f"bench-workers-{broker}-"))
        try:
            env = {"RUNLEDGER_AGENT_MODULES": AGENTS}
            with (
                broker_url(broker, root) as url,
                Cluster(root, broker_url=url, lease_seconds=30, env=env) as cluster,
            ):
                for i in range(options["workers"]):
                    cluster.worker(f"bench-{broker}-{i}", concurrency=options["concurrency"])
                return self._measure(cluster, label or broker, options)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _measure(self, cluster: Cluster, broker: str, options: dict[str, Any]) -> dict[str, Any]:
        runs, steps = options["runs"], options["steps"]
        ids = [
            start_unannounced(agent="bench-steps", inputs={"steps": steps}).run_id
            for _ in range(runs)
        ]
        commits = _commits()
        started = time.perf_counter()
        for run_id in ids:
            cluster.send(start_run, run_id)
        finished = Run.objects.filter(run_id__in=ids, status__in=FINAL_STATUSES)
        wait_for(lambda: finished.count() == runs, timeout=options["timeout"], interval=0.5)
        elapsed = time.perf_counter() - started
        commits = _commits() - commits
        lost = runs - Run.objects.filter(run_id__in=ids, status=RunStatus.SUCCEEDED).count()
        p50, p99 = _step_latency(ids)
        out = {
            f"{broker}_runs_per_s": (runs / elapsed, "runs/s"),
            f"{broker}_steps_per_s": (runs * steps / elapsed, "steps/s"),
            f"{broker}_commits_per_s": (commits / elapsed, "commits/s"),
            f"{broker}_step_latency_p50": (p50, "ms"),
            f"{broker}_step_latency_p99": (p99, "ms"),
            f"{broker}_runs_not_succeeded": (lost, "runs"),
            f"{broker}_elapsed": (elapsed, "s"),
        }
        for name, (value, unit) in out.items():
            self.stdout.write(f"{name}: {value:.3f} {unit}")
        return {name: {"value": v, "unit": u} for name, (v, u) in out.items()}


def _pgbench(clients: int, seconds: int) -> float | None:
    """pgbench's transactions/s for the floor's INSERT+COMMIT (autocommit, one row) with
    ``clients`` clients on the ledger's server; None when pgbench is not installed."""
    found = shutil.which("pgbench") or next(
        iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)), None
    )
    if found is None:
        return None
    db = connection.settings_dict
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_floor (id integer, note text)")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write("INSERT INTO bench_floor VALUES (1, 'x');\n")
    env = {**os.environ, "PGHOST": str(db["HOST"] or ""), "PGPORT": str(db["PORT"] or ""),
           "PGUSER": str(db["USER"] or ""), "PGPASSWORD": str(db["PASSWORD"] or ""),
           "PGDATABASE": str(db["NAME"])}  # fmt: skip
    try:
        done = subprocess.run(
            [found, "-n", "-c", str(clients), "-j", str(clients), "-T", str(seconds),
             "-f", script.name],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
    finally:
        os.unlink(script.name)
        with connection.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS bench_floor")
    match = re.search(r"tps = ([0-9.]+)", done.stdout)
    return float(match.group(1)) if match else None


def _commits() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        value = int(cur.fetchone()[0])
        cur.execute("SELECT pg_stat_clear_snapshot()")
    return value


def _step_latency(ids: list[str]) -> tuple[float, float]:
    """p50 and p99 ms between consecutive steps' commits (finished_at) within each run."""
    rows = (
        Step.objects.filter(run_id__in=ids)
        .order_by("run_id", "seq")
        .values_list("run_id", "finished_at")
    )
    gaps: list[float] = []
    last: tuple[Any, Any] = (None, None)
    for run_id, at in rows:
        if last[0] == run_id and at is not None and last[1] is not None:
            gaps.append((at - last[1]).total_seconds() * 1000)
        last = (run_id, at)
    if not gaps:
        return 0.0, 0.0
    gaps.sort()
    return statistics.median(gaps), gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))]
