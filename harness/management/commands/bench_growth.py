"""How a resume grows with the ledger: `make bench` (issue 22, item 4).

For each size (1,000, 10,000 and 100,000 steps by default) a failed, resumable run of that many
succeeded read steps is recorded (its first 10 steps by the engine, the rest copied in bulk
with the same hashing and links: ``bench_engine``'s recorded run), then resumed in a fresh
worker process (``bench_engine --resume-only``), which replays every step. Per size: the
resume's wall and CPU time, its ledger queries, the worker's peak resident set and its growth
over the resume. Then the growth itself: each time and memory figure of the largest size over
the smallest's, divided by the size ratio (1.0 is linear; above 1, steeper than linear), and
the cost per step at each size.

Prints ``name: value unit`` lines; with ``--json`` adds them to the figures file under
``growth``. Runs it creates are deleted afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from harness.bench.results import merge_json
from harness.management.commands import bench_engine
from ledger.models import Run, Step


class Command(BaseCommand):
    help = "Resume time and peak memory for 1,000 / 10,000 / 100,000-step ledgers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="1000,10000,100000", help="steps per ledger")
        parser.add_argument("--json", default="", help="add the figures to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        sizes = sorted(int(s) for s in options["sizes"].split(",") if s.strip())
        engine = bench_engine.Command()
        engine.stdout, engine.stderr = self.stdout, self.stderr
        engine._created = []
        figures: dict[str, tuple[float, str]] = {}
        per_size: dict[int, dict[str, Any]] = {}
        load = os.getloadavg()[0]
        self.stdout.write(f"# resume growth on {connection.vendor}; load {load:.1f}")
        try:
            for n in sizes:
                t = time.perf_counter()
                run_id = engine._recorded_run(n)
                seeded = time.perf_counter() - t
                answer = self._resume(run_id, n)
                answer["seed_seconds"] = seeded
                per_size[n] = answer
                growth = answer["peak_rss_mb"] - answer["rss_before_mb"]
                figures[f"resume_growth_{n}_steps"] = (answer["seconds"], "s")
                figures[f"resume_growth_{n}_steps_cpu"] = (answer["cpu_seconds"], "s")
                figures[f"resume_growth_{n}_steps_per_step"] = (
                    answer["seconds"] / n * 1e6,
                    "us",
                )
                figures[f"resume_growth_{n}_ledger_queries"] = (answer["ledger_queries"], "queries")
                figures[f"resume_growth_{n}_peak_rss"] = (answer["peak_rss_mb"], "MB")
                figures[f"resume_growth_{n}_rss_growth"] = (growth, "MB")
                figures[f"resume_growth_{n}_rss_per_step"] = (growth * 1024 / n, "KB")
                for name in [k for k in figures if k.startswith(f"resume_growth_{n}_")]:
                    value, unit = figures[name]
                    self.stdout.write(f"{name}: {value:.3f} {unit}")
                # The copied rows go now: the next size is measured on a ledger of its own size.
                Step.objects.filter(run_id=run_id).delete()
        finally:
            Step.objects.filter(run_id__in=engine._created).delete()
            Run.objects.filter(run_id__in=engine._created).delete()
        if len(sizes) > 1:
            small, large = sizes[0], sizes[-1]
            scale = large / small
            a, b = per_size[small], per_size[large]
            slopes = {
                "time": b["seconds"] / a["seconds"] / scale,
                "cpu": b["cpu_seconds"] / a["cpu_seconds"] / scale,
                "rss_growth": (
                    (b["peak_rss_mb"] - b["rss_before_mb"])
                    / max(a["peak_rss_mb"] - a["rss_before_mb"], 0.1)
                    / scale
                ),
            }
            for what, slope in slopes.items():
                name = f"resume_growth_{what}_{large}_over_{small}_per_size"
                figures[name] = (slope, "x (1 = linear)")
                self.stdout.write(f"{name}: {slope:.3f} x (1 = linear)")
        self.stdout.write(f"# load at the end {os.getloadavg()[0]:.1f}")
        if options["json"]:
            values: dict[str, Any] = {n: {"value": v, "unit": u} for n, (v, u) in figures.items()}
            values["load_average"] = {"value": [load, os.getloadavg()[0]], "unit": "start, end"}
            merge_json(Path(options["json"]), "growth", values)

    def _resume(self, run_id: str, steps: int) -> dict[str, Any]:
        """``bench_engine``'s resume in a fresh worker process: one JSON line back."""
        env = {**os.environ, "RUNLEDGER_MAX_STEPS_PER_RUN": str(max(steps, 10000))}
        child = subprocess.run(
            [sys.executable, sys.argv[0], "bench_engine", "--resume-only", run_id,
             "--resume-steps", str(steps)],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip
        answer: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
        return answer
