"""What flow control costs per step (issue 34): runs of ``--steps`` read steps executed in this
process, plain, with every step's tool rate-limited (a limit too high to ever wait: the cost is
the slot's statement), and started with a concurrency key (the keyed claim's transaction, spread
over the run's steps). Variants interleaved, ``--rounds`` rounds, the median per variant."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from harness.bench.results import merge_json
from ledger import signals, transitions
from ledger.agents import RunContext, agent, tool
from ledger.processes.execute import run_execute


@tool(kind="read", name="bench_pace_plain")
def plain(n: int) -> int:
    return n


@tool(kind="read", name="bench_pace_rated", rate_limit="1000000000/s")
def rated(n: int) -> int:
    return n


@agent("bench-pace-plain", tools=[plain])
def plain_agent(ctx: RunContext, inputs: dict[str, Any]) -> int:
    return sum(ctx.call(plain, step=f"s{i}", n=i) for i in range(int(inputs["steps"])))


@agent("bench-pace-rated", tools=[rated])
def rated_agent(ctx: RunContext, inputs: dict[str, Any]) -> int:
    return sum(ctx.call(rated, step=f"s{i}", n=i) for i in range(int(inputs["steps"])))


VARIANTS = {
    "plain": ("bench-pace-plain", False),
    "rate_limited": ("bench-pace-rated", False),
    "concurrency_keyed": ("bench-pace-plain", True),
}


class Command(BaseCommand):
    help = "Per-step cost of a rate-limited and a concurrency-keyed run against a plain one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--runs", type=int, default=20, help="runs per variant and round")
        parser.add_argument("--steps", type=int, default=10, help="steps per run")
        parser.add_argument("--json", default="", help="add the figures to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            self.stdout.write("# bench_pacing measures PostgreSQL only")
            return
        call_command("migrate", verbosity=0)
        runs, steps = options["runs"], options["steps"]
        seen: dict[str, list[float]] = {name: [] for name in VARIANTS}
        self._round("plain", 5, steps)  # warm: imports, prepared statements, the first rows
        for _ in range(options["rounds"]):
            for name in VARIANTS:
                seen[name].append(self._round(name, runs, steps))
        figures = {f"pacing_{n}_step_us": statistics.median(v) for n, v in seen.items()}
        base = figures["pacing_plain_step_us"]
        self.stdout.write(
            f"# {options['rounds']} rounds of {runs} runs x {steps} read steps per variant, "
            "in process, median per step (claim to finish, divided by the steps)"
        )
        for name, value in figures.items():
            extra = "" if name == "pacing_plain_step_us" else f" ({value - base:+.1f} us vs plain)"
            self.stdout.write(f"{name}: {value:.1f} us{extra}")
        if options["json"]:
            merge_json(
                Path(options["json"]),
                "pacing",
                {name: {"value": v, "unit": "us"} for name, v in figures.items()},
            )

    def _round(self, name: str, runs: int, steps: int) -> float:
        """Microseconds per step of ``runs`` runs of this variant, executed one after another."""
        agent_name, keyed = VARIANTS[name]
        ids = []
        with signals.held():
            for i in range(runs):
                pace = transitions.Pace(concurrency_key=f"bench:{i}") if keyed else None
                started = transitions.run_start_once(
                    agent=agent_name, inputs={"steps": steps}, pace=pace
                )
                ids.append(started.run.run_id)
        began = time.perf_counter()
        for run_id in ids:
            outcome = run_execute(run_id=run_id, worker="bench", heartbeat=False)
            assert outcome is not None and outcome.status == "succeeded", outcome
        return (time.perf_counter() - began) / (runs * steps) * 1e6
