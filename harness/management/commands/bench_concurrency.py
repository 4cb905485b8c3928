"""Runs in flight: R runs of 5 model calls (a loopback model answering after 2 s) and 5 reads
started at once, on real ``runledger worker`` processes and on DBOS Transact, alternating, on
this PostgreSQL (see ``harness.bench.concurrency``).

    make bench-concurrency                       # R = 10, 100, 1000
    make bench-concurrency BENCH_ARGS='--runs 10,100,1000,5000'

Prints ``name: value unit`` lines, ``concurrency.<system>.<mode>.R<R>.{wall_s,start_rate,
peak_rss_mib,peak_db_conns,errors}``, and each against its goal (1,000 runs in flight within 1.5x
the ideal wall time, <= 1 GiB RSS of all worker processes, <= 25 PostgreSQL connections at every
R). Needs a migrated PostgreSQL (DATABASE_URL) and RUNLEDGER_HARNESS=1; ``--peers`` the peers'
virtualenv's python for DBOS. The broker: the machine's Redis (127.0.0.1:6379) when it answers,
else the filesystem broker (``--broker`` chooses).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from harness.bench import concurrency
from harness.bench.concurrency import DBOS_MODES, Bench, Cell, Mode


class Command(BaseCommand):
    help = "Runs in flight at R = 10 / 100 / 1,000 (/ 5,000): wall time, memory, connections."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", default="10,100,1000", help="the R list, e.g. 10,100,1000")
        parser.add_argument(
            "--with-5000", action="store_true", help="add R=5000 (takes long on a small machine)"
        )
        parser.add_argument("--calls", type=int, default=5, help="model calls per run")
        parser.add_argument("--reads", type=int, default=5, help="read steps per run")
        parser.add_argument("--delay", type=float, default=2.0, help="the model's answer, s")
        parser.add_argument(
            "--modes",
            default="threads,prefork,async",
            help="runledger's modes: built-in names, or NAME=ARGS / NAME=AGENT:ARGS where ARGS "
            "is the command line after `runledger` ({n}: R capped at 1000)",
        )
        parser.add_argument(
            "--mode",
            action="append",
            default=[],
            help="one more runledger mode, NAME=ARGS or NAME=AGENT:ARGS (repeatable)",
        )
        parser.add_argument("--dbos", default="sync,async", help="DBOS's modes ('' for none)")
        parser.add_argument("--peers", default="", help="the peers' virtualenv's python (DBOS)")
        parser.add_argument(
            "--broker", default="auto", help="auto (Redis if it answers), redis or filesystem"
        )
        parser.add_argument(
            "--timeout", type=float, default=600, help="seconds a cell may take before its "
            "unfinished runs count as errors"
        )  # fmt: skip
        parser.add_argument("--json", default="", help="add the figures to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("bench_concurrency needs PostgreSQL (DATABASE_URL)")
        try:
            sizes = [int(r) for r in options["runs"].split(",") if r.strip()]
            ours = [concurrency.parse_mode(m) for m in options["modes"].split(",") if m.strip()]
            ours += [concurrency.parse_mode(m) for m in options["mode"]]
            peers = [DBOS_MODES[m] for m in options["dbos"].split(",") if m.strip()]
        except (ValueError, KeyError) as exc:
            raise CommandError(f"bad option: {exc}") from exc
        if options["with_5000"] and 5000 not in sizes:
            sizes.append(5000)
        if any(r < 1 for r in sizes):
            raise CommandError("every R must be at least 1")
        figures: dict[str, Any] = {}
        works, why = concurrency.async_agents_work()
        for mode in [m for m in ours if m.needs_async and not works]:
            name = f"concurrency.{mode.system}.{mode.name}"
            self.stdout.write(f"{name}.*: skipped (no async agents: {why})")
            figures[f"{name}.skipped"] = f"no async agents: {why}"
            ours.remove(mode)
        broker = self._broker(options["broker"])
        self.stdout.write(
            f"# broker {broker}; R {sizes}; {options['calls']} calls of {options['delay']} s and "
            f"{options['reads']} reads per run; {os.cpu_count()} cores; "
            f"load {os.getloadavg()[0]:.2f}"
        )
        with concurrency.model_server(options["delay"]) as model_url:
            bench = Bench(
                model_url=model_url,
                broker=broker,
                calls=options["calls"],
                reads=options["reads"],
                delay=options["delay"],
                timeout=options["timeout"],
                peers_python=options["peers"],
                log=self.stdout.write,
            )
            self._show(figures, "concurrency.ideal_wall_s", bench.ideal_s, "s")
            for runs in sizes:
                for mode in concurrency.alternate(ours, peers):
                    self._cell(bench, figures, mode, runs)
            if bench.dbos_versions:
                figures["concurrency.dbos_versions"] = bench.dbos_versions
            shutil.rmtree(bench.root, ignore_errors=True)
        self._goals(figures, ours + peers, sizes, bench.ideal_s)
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(Path(options["json"]), "concurrency", figures)

    def _broker(self, choice: str) -> str:
        if choice not in ("auto", "redis", "filesystem"):
            raise CommandError(f"--broker takes auto, redis or filesystem, not {choice!r}")
        if choice != "filesystem":
            url = concurrency.redis_url()
            if url is not None:
                return url
            if choice == "redis":
                raise CommandError("no Redis answers at 127.0.0.1:6379 (or none of its DBs empty)")
        return "filesystem://localhost//"

    def _cell(self, bench: Bench, figures: dict[str, Any], mode: Mode, runs: int) -> None:
        prefix = f"concurrency.{mode.system}.{mode.name}.R{runs}"
        if mode.max_r is not None and runs > mode.max_r:
            self.stdout.write(f"{prefix}.*: skipped (R above this mode's {mode.max_r})")
            return
        self.stdout.write(f"# {prefix}: load {os.getloadavg()[0]:.2f}")
        cell: Cell = bench.measure(mode, runs)
        if cell.skipped:
            self.stdout.write(f"{prefix}.*: skipped ({cell.skipped})")
            figures[f"{prefix}.skipped"] = cell.skipped
            return
        for name, (value, unit) in cell.figures(bench.ideal_s).items():
            self._show(figures, name, value, unit)
        if cell.note:
            self.stdout.write(f"# {prefix}:{cell.note}")
            figures[f"{prefix}.note"] = cell.note.strip()

    def _show(self, figures: dict[str, Any], name: str, value: float | None, unit: str) -> None:
        shown = "not measured" if value is None else f"{value:.3f}"
        self.stdout.write(f"{name}: {shown} {unit}")
        figures[name] = {"value": value, "unit": unit}

    def _goals(
        self, figures: dict[str, Any], modes: list[Mode], sizes: list[int], ideal_s: float
    ) -> None:
        """The goals, one line each per system and mode: met or not, and by what figure."""
        self.stdout.write(
            f"# goals: {concurrency.GOAL_AT_R} runs in flight within "
            f"{concurrency.GOAL_WALL_RATIO}x the ideal {ideal_s:g} s, <= 1 GiB RSS of all "
            f"worker processes, <= {concurrency.GOAL_DB_CONNS} PostgreSQL connections at every R"
        )
        for mode in modes:
            head = f"concurrency.{mode.system}.{mode.name}"
            at = f"{head}.R{concurrency.GOAL_AT_R}"
            wall = figures.get(f"{at}.wall_s", {}).get("value")
            errors = figures.get(f"{at}.errors", {}).get("value")
            if wall is None:
                self.stdout.write(f"{head}.goal_wall: not measured at R{concurrency.GOAL_AT_R}")
            else:
                met = wall <= concurrency.GOAL_WALL_RATIO * ideal_s and not errors
                self.stdout.write(
                    f"{head}.goal_wall: {'met' if met else 'not met'} "
                    f"({wall / ideal_s:.2f}x ideal, {errors} errors)"
                )
            rss = [figures.get(f"{head}.R{r}.peak_rss_mib", {}).get("value") for r in sizes]
            conns = [figures.get(f"{head}.R{r}.peak_db_conns", {}).get("value") for r in sizes]
            rss_seen = [v for v in rss if v is not None]
            conns_seen = [v for v in conns if v is not None]
            if rss_seen:
                top = max(rss_seen)
                met = top <= concurrency.GOAL_RSS_MIB
                self.stdout.write(
                    f"{head}.goal_rss: {'met' if met else 'not met'} (peak {top:.0f} MiB, "
                    f"{top / concurrency.GOAL_RSS_MIB:.2f}x of 1 GiB)"
                )
            if conns_seen:
                top = max(conns_seen)
                met = top <= concurrency.GOAL_DB_CONNS
                self.stdout.write(
                    f"{head}.goal_db_conns: {'met' if met else 'not met'} (peak {top}, "
                    f"{top / concurrency.GOAL_DB_CONNS:.2f}x of {concurrency.GOAL_DB_CONNS})"
                )
