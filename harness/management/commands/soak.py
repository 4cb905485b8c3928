"""`make soak`: a thousand trials mixing SIGKILL, SIGSTOP zombies and connection cuts, on the
default broker and on Redis, bounded in time. The last line of output is the summary.

Runs in a database of its own (``<NAME>_soak``) on the PostgreSQL server of DATABASE_URL.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from harness import soak
from harness.trials import finish, scratch, seed_of


class Command(BaseCommand):
    help = "Mix every fault (kill, freeze, cut) on real workers and two brokers; check recovery."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--trials", type=int, default=int(os.environ.get("SOAK_TRIALS", "1000"))
        )
        parser.add_argument(
            "--minutes",
            type=float,
            default=float(os.environ.get("SOAK_MINUTES", "45")),
            help="no batch starts after this many minutes (the soak stops by itself)",
        )
        parser.add_argument("--seed", type=int, help="replay the plan of an earlier soak")
        parser.add_argument("--only", type=int, help="run just this trial of the plan")
        parser.add_argument("--parallel", type=int, default=4, help="victim workers at once")
        parser.add_argument("--brokers", default=",".join(soak.BROKERS), help="filesystem,redis")

    def handle(self, *args: Any, **options: Any) -> None:
        seed = seed_of(options)
        brokers = tuple(b for b in options["brokers"].split(",") if b)
        self.stdout.write(
            f"soak: seed={seed} trials={options['trials']} brokers={','.join(brokers)} "
            f"budget={options['minutes']}min"
        )
        with scratch("soak") as root:
            report = soak.run(
                trials=options["trials"],
                seed=seed,
                root=root,
                budget_seconds=options["minutes"] * 60,
                brokers=brokers,
                parallel=options["parallel"],
                progress=self.stderr.write,
                only=options["only"],
            )
        finish(self.stdout, report, name="soak", seed=seed, summary=report.soak_line())
