"""The HTTP API's speed on a real stack (gunicorn, Celery, PostgreSQL, a private Redis):

- runs started per second through ``POST /api/v1/runs`` by 1 and by 8 concurrent clients
  (``ledger.client``, one HTTP connection each; no worker runs meanwhile, so the figure is the
  start path alone: token, validation, the run row, the audit row, the broker message);
- the latency from a run's finish (``Run.finished_at``, the worker's commit) to the client's
  ``wait`` answering, p50 and p99, for runs of one step started one after another while a
  worker executes them.

Prints ``name: value unit`` lines. Needs PostgreSQL (DATABASE_URL) and RUNLEDGER_HARNESS=1.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from harness.api_stack import ApiStack
from harness.bench import agents
from harness.soak import broker as broker_url
from ledger import client as rl
from ledger.models import Run
from runs.api import tokens

AGENTS = f"ledger.examples.agents,{agents.__name__}"


class Command(BaseCommand):
    help = "Runs started per second through the HTTP API, and finish-to-wait latency."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--starts", type=int, default=400, help="starts per measurement")
        parser.add_argument("--waits", type=int, default=100, help="runs timed finish to wait")
        parser.add_argument("--broker", default="redis", choices=["redis", "filesystem"])
        parser.add_argument("--json", default="", help="add the figures to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            self.stdout.write("# bench_api needs PostgreSQL")
            return
        call_command("migrate", verbosity=0)
        root = Path(tempfile.mkdtemp(prefix="bench-api-"))
        secret = tokens.token_create(name=f"bench-{time.time_ns()}", role="operator").secret
        env = {"RUNLEDGER_AGENT_MODULES": AGENTS}
        broker = options["broker"] if shutil.which("redis-server") else "filesystem"
        try:
            with (
                broker_url(broker, root) as url,
                ApiStack(root / "stack", broker_url=url, env=env, lease_seconds=30) as stack,
            ):
                figures = {
                    **self._starts(stack, secret, 1, options["starts"] // 4),
                    **self._starts(stack, secret, 8, options["starts"]),
                }
                stack.worker("bench-api", concurrency=2)
                figures.update(self._latency(stack, secret, options["waits"]))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        for name, (value, unit) in figures.items():
            self.stdout.write(f"{name}: {value:.3f} {unit}")
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(
                Path(options["json"]),
                "http_api",
                {name: {"value": v, "unit": u} for name, (v, u) in figures.items()},
            )

    def _starts(
        self, stack: ApiStack, secret: str, clients: int, starts: int
    ) -> dict[str, tuple[float, str]]:
        each = max(1, starts // clients)
        errors: list[BaseException] = []

        def one_client() -> None:
            try:
                with rl.Client(stack.url, secret) as api:
                    for _ in range(each):
                        api.start("bench-steps", {"steps": 1})
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=one_client) for _ in range(clients)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - began
        if errors:
            raise errors[0]
        return {f"api_starts_per_s_{clients}_clients": (each * clients / elapsed, "runs/s")}

    def _latency(self, stack: ApiStack, secret: str, runs: int) -> dict[str, tuple[float, str]]:
        # Let the worker drain the runs the start measurements queued first.
        with rl.Client(stack.url, secret) as api:
            deadline = time.monotonic() + 900
            while Run.objects.exclude(status="succeeded").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker did not drain the queued runs")
                time.sleep(0.5)
            gaps: list[float] = []
            for _ in range(runs):
                run = api.start("bench-steps", {"steps": 1})
                done = api.wait(run.run_id, timeout=120)
                answered = time.time()
                if done.status != "succeeded" or done.finished_at is None:
                    raise RuntimeError(f"run {run.run_id}: {done.status}")
                gaps.append((answered - done.finished_at.timestamp()) * 1000)
        gaps.sort()
        return {
            "api_finish_to_wait_p50": (statistics.median(gaps), "ms"),
            "api_finish_to_wait_p99": (gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))], "ms"),
        }
