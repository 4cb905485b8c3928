"""Start a run of a registered agent: `manage.py start_run refund --inputs '{"invoice_id": …}'`.

The inputs are checked before anything is written (JSON, and what the agent ``requires``).
Audited as ``cli:<login>``. Exit codes: see ``_common`` (``--inline``: 3 unless it succeeds).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import registry, transitions
from ledger.errors import NotJSON
from runs.operations.commands import (
    EXIT_REFUSED,
    OperatorCommand,
    add_where,
    bounded_int,
    execute_inline,
    parse_json,
    where,
)


class Command(OperatorCommand):
    help = "Start a run of an agent with JSON inputs, on a Celery worker (default) or inline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="a registered agent's name")
        parser.add_argument("--inputs", default="{}", help="the run's inputs as JSON")
        parser.add_argument("--run-id", help="choose the run id (default: a fresh one)")
        parser.add_argument(
            "--max-resumes", type=bounded_int(0, 1_000_000), help="the run's resume budget"
        )
        add_where(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        inputs = parse_json(options["inputs"], what="--inputs")
        name = options["agent"]
        if registry.get_agent(name) is None:
            known = ", ".join(sorted(registry.agents())) or "none"
            raise CommandError(
                f"no agent named {name!r} is registered (registered: {known})",
                returncode=EXIT_REFUSED,
            )
        try:
            with where(options):  # announced to the workers after the commit, unless --inline
                run = transitions.run_start(
                    agent=name,
                    inputs=inputs,
                    run_id=options["run_id"],
                    max_resumes=options["max_resumes"],
                    by=transitions.cli_actor(),
                    reason="started from the command line",
                )
        except (NotJSON, ValueError) as exc:  # InvalidInput is a ValueError
            raise CommandError(str(exc), returncode=EXIT_REFUSED) from exc
        if options["inline"]:
            execute_inline(run.run_id, self.stdout)
        else:
            self.stdout.write(f"run {run.run_id}: queued for a worker")
