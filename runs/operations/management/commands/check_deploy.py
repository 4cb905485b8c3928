"""What the agent code loaded now would do to every run in flight: `manage.py check_deploy`.

Run it in CI with the new code against a copy of production's ledger before a deploy: it exits
1 when a resume would stop any run for a person (stale, diverged, missing, settle, error).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.processes.deploy_check import deploy_check


class Command(BaseCommand):
    help = (
        "Dry-replay every unfinished run against the agent code loaded now and report, per "
        "run, what a resume would do; exit 1 when any run would block. Reads only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="only runs of this agent")
        parser.add_argument("--limit", type=int, default=1000, help="most runs to check")
        parser.add_argument(
            "--seconds", type=float, default=5.0, help="most time for one run's dry replay"
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per run")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1 or options["seconds"] <= 0:
            raise CommandError("--limit must be at least 1 and --seconds above 0")
        blocked = checked = 0
        for verdict in deploy_check(
            agent=options["agent"], limit=options["limit"], seconds=options["seconds"]
        ):
            checked += 1
            blocked += verdict.blocks
            if options["json"]:
                self.stdout.write(json.dumps({**asdict(verdict), "blocks": verdict.blocks}))
                continue
            where = f" at {verdict.step_id}" if verdict.step_id else ""
            changed = f" [changed: {', '.join(verdict.changed)}]" if verdict.changed else ""
            self.stdout.write(
                f"{verdict.run_id:<26} {verdict.agent:<14} {verdict.status:<16} "
                f"{verdict.verdict.upper()}{where}: {verdict.detail}{changed}"
            )
        summary = f"check_deploy: {checked} run(s) in flight, {blocked} would block"
        if blocked:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)
