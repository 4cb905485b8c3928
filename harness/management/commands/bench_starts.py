"""Runs started per second, one by one against batched (issue 31, item 3), on a real broker
(a private Redis when ``redis-server`` is installed, else the filesystem broker) and PostgreSQL,
no worker running (the figure is the start path alone: validation, the run rows, the audit rows,
the broker messages):

- in process: ``ledger.api.start_run`` in a loop against ``ledger.api.start_runs`` in batches
  of 100 and 1,000 (``start.one_by_one.inprocess``, ``start.batch100.inprocess``,
  ``start.batch1000.inprocess``);
- the publish alone, for the choice of how a batch reaches the broker: one ``start_run``
  message per run sent by ``delay`` (a producer taken from the pool per message), the same
  messages sent over one producer (what a worker's fan-out, ``tasks.start_runs``, does), and
  one message carrying 1,000 run ids (``tasks.send_starts``, what a batch start sends):
  ``start.publish.each``, ``start.publish.one_producer``, ``start.publish.one_message``;
- over HTTP (gunicorn, ``ledger.client``, one connection): ``Client.start`` in a loop against
  ``Client.start_many`` of 1,000 (``start.one_by_one.http``, ``start.batch1000.http``).

Prints ``name: value unit`` lines. Needs PostgreSQL (DATABASE_URL) and RUNLEDGER_HARNESS=1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from harness.api_stack import ApiStack
from harness.bench import agents
from harness.soak import broker as broker_url
from ledger import client as rl
from runs.api import tokens

AGENTS = f"ledger.examples.agents,{agents.__name__}"
Figures = dict[str, tuple[float, str]]


def _inputs(i: int) -> dict[str, Any]:
    return {"steps": 1, "n": i}


class Command(BaseCommand):
    help = "Runs started per second, one by one against batched, in process and over HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=2000, help="runs per batched measurement")
        parser.add_argument(
            "--single", type=int, default=500, help="runs per one-by-one measurement"
        )
        parser.add_argument("--broker", default="redis", choices=["redis", "filesystem"])
        parser.add_argument("--json", default="", help="add the figures to this file")
        parser.add_argument("--in-process", action="store_true", help=_child_help())

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            self.stdout.write("# bench_starts needs PostgreSQL")
            return
        if options["in_process"]:
            self.stdout.write(json.dumps(_in_process(options["runs"], options["single"])))
            return
        call_command("migrate", verbosity=0)
        root = Path(tempfile.mkdtemp(prefix="bench-starts-"))
        broker = options["broker"] if shutil.which("redis-server") else "filesystem"
        try:
            with broker_url(broker, root) as url:
                figures = self._child(url, options["runs"], options["single"])
                figures.update(self._http(root, url, options["runs"], options["single"]))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        load = os.getloadavg()[0]
        self.stdout.write(
            f"# broker {broker}, {options['single']} runs one by one, {options['runs']} batched, "
            f"load {load:.1f}"
        )
        for name, (value, unit) in figures.items():
            self.stdout.write(f"{name}: {value:.1f} {unit}")
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(
                Path(options["json"]),
                "starts",
                {name: {"value": v, "unit": u} for name, (v, u) in figures.items()},
            )

    def _child(self, url: str, runs: int, single: int) -> Figures:
        """The in-process figures from a child process whose Celery app publishes to ``url``."""
        env = {
            **os.environ,
            "CELERY_BROKER_URL": url,
            "RUNLEDGER_QUEUE": f"bench-starts-{uuid.uuid4().hex[:8]}",
            "RUNLEDGER_AGENT_MODULES": AGENTS,
        }
        done = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "bench_starts",
                "--in-process",
                f"--runs={runs}",
                f"--single={single}",
            ],
            env=env,
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
        last = done.stdout.strip().splitlines()[-1]
        return {name: (value, unit) for name, (value, unit) in json.loads(last).items()}

    def _http(self, root: Path, url: str, runs: int, single: int) -> Figures:
        secret = tokens.token_create(name=f"bench-{time.time_ns()}", role="operator").secret
        env = {"RUNLEDGER_AGENT_MODULES": AGENTS}
        with (
            ApiStack(root / "stack", broker_url=url, env=env, lease_seconds=30) as stack,
            rl.Client(stack.url, secret) as api,
        ):
            api.start("bench-steps", {"steps": 1})  # warm: the connection, the token
            began = time.perf_counter()
            for i in range(single):
                api.start("bench-steps", _inputs(i))
            one_by_one = single / (time.perf_counter() - began)
            began = time.perf_counter()
            for first in range(0, runs, 1000):
                made = api.start_many(
                    [
                        {"agent": "bench-steps", "inputs": _inputs(i)}
                        for i in range(first, min(runs, first + 1000))
                    ]
                )
                assert all(r.created for r in made)
            batched = runs / (time.perf_counter() - began)
        return {
            "start.one_by_one.http": (one_by_one, "runs/s started"),
            "start.batch1000.http": (batched, "runs/s started"),
        }


def _child_help() -> str:
    return "internal: measure in this process (its broker is CELERY_BROKER_URL) and print JSON"


def _in_process(runs: int, single: int) -> dict[str, tuple[float, str]]:
    from ledger import api
    from runs.operations import tasks

    api.start_run("bench-steps", {"steps": 1})  # warm: the broker connection, the agent
    out: dict[str, tuple[float, str]] = {}
    began = time.perf_counter()
    for i in range(single):
        api.start_run("bench-steps", _inputs(i), by="bench")
    out["start.one_by_one.inprocess"] = (single / (time.perf_counter() - began), "runs/s started")
    for size in (100, 1000):
        began = time.perf_counter()
        for first in range(0, runs, size):
            items = [
                {"agent": "bench-steps", "inputs": _inputs(i)}
                for i in range(first, min(runs, first + size))
            ]
            api.start_runs(items, by="bench")
        rate = runs / (time.perf_counter() - began)
        out[f"start.batch{size}.inprocess"] = (rate, "runs/s started")
    ids = [f"run_bench_{uuid.uuid4().hex}" for _ in range(runs)]
    began = time.perf_counter()
    for run_id in ids:
        tasks.send_start(run_id)
    out["start.publish.each"] = (runs / (time.perf_counter() - began), "runs/s sent")
    began = time.perf_counter()
    for first in range(0, runs, 1000):
        tasks.start_runs.run(ids[first : first + 1000])  # the worker's fan-out, in this process
    out["start.publish.one_producer"] = (runs / (time.perf_counter() - began), "runs/s sent")
    began = time.perf_counter()
    for first in range(0, runs, 1000):
        tasks.send_starts(ids[first : first + 1000])
    out["start.publish.one_message"] = (runs / (time.perf_counter() - began), "runs/s sent")
    return out
