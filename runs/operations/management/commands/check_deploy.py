"""What the agent code loaded now would do to every run in flight: `manage.py check_deploy`.

Run it in CI with the new code against a copy of production's ledger before a deploy. Exit codes:
0 no run would block; 1 a resume would stop at least one run for a person (stale, diverged,
missing, settle, error); 2 the check could not be made, in one line: an agent module named in
``RUNLEDGER_AGENT_MODULES`` failed to import, the database does not answer, or it is not
migrated. A deploy pipeline stops on anything but 0 and tells 1 ("these runs would block")
from 2 ("fix the check's environment").
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor

from ledger import registry
from ledger.engine import pooling
from ledger.processes.deploy_check import deploy_check

EXIT_WOULD_BLOCK = 1
EXIT_COULD_NOT_CHECK = 2


def could_not_check() -> str:
    """Why the check cannot be made here, in one line; "" when it can."""
    broken = registry.import_errors()
    if broken:
        module, error = next(iter(sorted(broken.items())))
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        return f"agent module {module} failed to import: {_line(error)}{more}"
    down = pooling.unreachable()  # at once, where the pool would wait its timeout to say less
    if down:
        return f"the database does not answer ({_line(down)})"
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        return f"the database does not answer ({type(exc).__name__}: {_line(str(exc))})"
    if plan:
        return (
            f"the database is not migrated ({len(plan)} migrations not applied: runledger migrate)"
        )
    return ""


def _line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:200]


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

    requires_system_checks: list[str] = []  # a database that does not answer is exit 2 here

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1 or options["seconds"] <= 0:
            raise CommandError("--limit must be at least 1 and --seconds above 0")
        why = could_not_check()
        if why:
            raise CommandError(
                f"check_deploy: could not check: {why}", returncode=EXIT_COULD_NOT_CHECK
            )
        try:
            self._check(options)
        except DatabaseError as exc:
            text = f"{type(exc).__name__}: {_line(str(exc))}"
            raise CommandError(
                f"check_deploy: could not check: {text}", returncode=EXIT_COULD_NOT_CHECK
            ) from None

    def _check(self, options: dict[str, Any]) -> None:
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
            raise CommandError(summary, returncode=EXIT_WOULD_BLOCK)
        self.stdout.write(summary)
