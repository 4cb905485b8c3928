"""``manage.py bench_retention --runs 1000000``: does retention keep up? Seeds finished runs
(synthetic rows in the engine's shape, written with COPY as ``seed_bulk`` writes them, all
finished 40 to 70 days ago) into an empty ledger, then prunes them as beat does, tick after
tick of ``--budget`` seconds starting at retention's mark as beat does (``--from-start``: from
the oldest finished run, as ``prune_runs`` does), into a local archive directory, and prints the
runs pruned per second, each tick's time and its first query (which, from the start, passes over
every run pruned before).

    WITH_POSTGRES_FSYNC=on python harness/with_postgres.py \\
        python manage.py bench_retention --runs 200000 --steps-per-run 5

Prints ``name: value unit`` lines; the archive directory is a temporary one, deleted after.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.utils import timezone

from harness.management.commands.seed_bulk import _steps, copy_runs
from ledger import selectors
from ledger.models import Run, RunArchive, Step
from ledger.processes import retention


class Command(BaseCommand):
    help = "Seed finished runs with COPY, then prune them tick by tick; print runs/s."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=200_000)
        parser.add_argument("--steps-per-run", type=int, default=5)
        parser.add_argument("--budget", type=float, default=60.0, help="seconds per tick")
        parser.add_argument("--runs-per-file", type=int, default=2000)
        parser.add_argument("--batch", type=int, default=5000, help="rows deleted per commit")
        parser.add_argument("--max-ticks", type=int, default=100)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--json", default="", help="add the figures to this file")
        parser.add_argument(
            "--seeded",
            action="store_true",
            help="prune what an earlier run of this command seeded (and left) in this database",
        )
        parser.add_argument(
            "--from-start", action="store_true", help="each tick walks from the oldest run"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["seeded"]:
            left = Step.objects.count()
            self.stdout.write(f"seeded before: {Run.objects.count()} runs, {left} steps left")
        elif Run.objects.exists():
            raise CommandError("bench_retention needs an empty ledger (a throwaway database)")
        else:
            t0 = time.monotonic()
            rows = self._seed(options["runs"], options["steps_per_run"], options["seed"])
            seeded = time.monotonic() - t0
            self.stdout.write(f"seeded: {options['runs']} runs, {rows} steps in {seeded:.1f} s")
        directory = Path(tempfile.mkdtemp(prefix="bench-retention-"))
        try:
            self._prune(directory, options)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _prune(self, directory: Path, options: dict[str, Any]) -> None:
        store = retention.DirectoryStorage(location=directory)
        cutoff = timezone.now() - timedelta(days=30)
        total, started, ticks, firsts = 0, time.monotonic(), [], []
        for tick in range(options["max_ticks"]):
            t = time.monotonic()
            mark = None if options["from_start"] else selectors.retention_mark()
            selectors.runs_to_prune(finished_before=cutoff, limit=1, after=mark)
            first_query = time.monotonic() - t
            firsts.append(first_query)
            done = retention.prune_finished(
                finished_before=cutoff, store=store, by="bench", budget=options["budget"],
                runs_per_file=options["runs_per_file"], batch=options["batch"],
                from_mark=not options["from_start"],
            )  # fmt: skip
            total += done.runs
            ticks.append(done.seconds)
            self.stdout.write(
                f"tick {tick + 1}: {done.runs} runs, {done.deleted} rows deleted, "
                f"{done.files} files in {done.seconds:.1f} s "
                f"({done.runs / max(done.seconds, 1e-9):.0f} runs/s); first query "
                f"{first_query * 1000:.0f} ms"
            )
            if not done.more:
                break
        elapsed = time.monotonic() - started
        size = sum(p.stat().st_size for p in directory.rglob("*.jsonl.gz"))
        left = Step.objects.count()
        figures = {
            "runs_pruned": (total, "runs"),
            "steps_left": (left, "rows"),
            "prune_rate": (total / elapsed, "runs/s"),
            "prune_time": (elapsed, "s"),
            "ticks": (len(ticks), "ticks"),
            "tick_max": (max(ticks), f"s (budget {options['budget']:.0f} s)"),
            "first_query_first_tick": (firsts[0] * 1000, "ms"),
            "first_query_last_tick": (firsts[-1] * 1000, "ms"),
            "first_query_max": (max(firsts) * 1000, "ms"),
            "archive_size": (size / 1e6, "MB"),
            "archives": (RunArchive.objects.count(), "runs"),
        }
        for name, (value, unit) in figures.items():
            shown = f"{value:.0f}" if isinstance(value, int) or value >= 100 else f"{value:.1f}"
            self.stdout.write(f"{name}: {shown} {unit}")
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(
                Path(options["json"]),
                f"retention_{options['runs']}",
                {name: {"value": v, "unit": u} for name, (v, u) in figures.items()},
            )

    def _seed(self, runs: int, per_run: int, seed: int) -> int:
        rng = random.Random(seed)
        now = timezone.now()
        written = copy_runs(_finished_run(rng, now, i, per_run) for i in range(runs))
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("VACUUM ANALYZE ledger_run")
                cur.execute("VACUUM ANALYZE ledger_step")
        return written


def _finished_run(
    rng: random.Random, now: Any, i: int, per_run: int
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    run_id = f"run_{rng.getrandbits(80):020x}"
    created = now - timedelta(days=40 + 30 * i / 1_000_000, seconds=rng.uniform(0, 60))
    started = created + timedelta(seconds=1)
    finished = started + timedelta(seconds=rng.uniform(1, 600))
    step_rows, _ = _steps(rng, run_id, per_run, started, "succeeded", "")
    row = (
        run_id, "survey", json.dumps({"batch": i}), "succeeded", "", "", "", '{"ok": true}', "",
        "1", "0" * 64, "", 0, 10, 1, "", None, None, None, None, "", "",
        created, finished, finished, started, finished, f"bench run {i}", "{}",
    )  # fmt: skip
    return row, step_rows
