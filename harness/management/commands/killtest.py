"""`make killtest`: SIGKILL real Celery workers mid-run and check results and effects.

Runs in a database of its own (``<NAME>_killtest``, created and dropped here) on the PostgreSQL
server of DATABASE_URL. The last line of output is the summary the issue asks for.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from harness import killtest
from harness.trials import (
    finish,
    scratch,
    seed_of,
)


class Command(BaseCommand):
    help = "Kill real Celery workers at crash points and at random; check recovery is exact."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--trials", type=int, default=int(os.environ.get("KILLTEST_TRIALS", "200"))
        )
        parser.add_argument("--seed", type=int, help="replay the plan of an earlier run")
        parser.add_argument("--only", type=int, help="run just this trial of the plan")
        parser.add_argument("--parallel", type=int, default=4, help="victim workers at once")
        parser.add_argument(
            "--lease-seconds", type=float, default=2.0, help="the workers' lease (short: fast)"
        )
        parser.add_argument("--sweep-seconds", type=float, default=0.5, help="beat's interval")

    def handle(self, *args: Any, **options: Any) -> None:
        seed = seed_of(options)
        self.stdout.write(
            f"killtest: seed={seed} trials={options['trials']} lease={options['lease_seconds']}s "
            f"sweep={options['sweep_seconds']}s"
        )
        with scratch("killtest") as root:
            report = killtest.run(
                trials=options["trials"],
                seed=seed,
                root=root,
                parallel=options["parallel"],
                only=options["only"],
                lease_seconds=options["lease_seconds"],
                sweep_seconds=options["sweep_seconds"],
                progress=self.stderr.write,
            )
        finish(self.stdout, report, name="killtest", seed=seed, summary=report.summary_line())
