"""Start a run of a registered agent: `manage.py start_run refund --inputs '{"invoice_id": …}'`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger import registry, transitions
from ledger.errors import NotJSON
from runs import tasks
from runs.management.commands._common import execute_inline, parse_json, whole_number


class Command(BaseCommand):
    help = "Start a run of an agent with JSON inputs, on a Celery worker (default) or inline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="a registered agent's name")
        parser.add_argument("--inputs", default="{}", help="the run's inputs as JSON")
        parser.add_argument(
            "--run-id",
            help="choose the run id: 1-64 of A-Z a-z 0-9 _ . : - (default: a fresh one)",
        )
        parser.add_argument("--max-resumes", type=whole_number(), help="the run's resume budget")
        how = parser.add_mutually_exclusive_group()
        how.add_argument(
            "--enqueue", action="store_true", help="send it to a Celery worker (the default)"
        )
        how.add_argument("--inline", action="store_true", help="execute it in this process")

    def handle(self, *args: Any, **options: Any) -> None:
        inputs = parse_json(options["inputs"], what="--inputs")
        name = options["agent"]
        if registry.get_agent(name) is None:
            known = ", ".join(sorted(registry.agents())) or "none"
            raise CommandError(f"no agent named {name!r} is registered (registered: {known})")
        try:
            with transaction.atomic():
                run = transitions.run_start(
                    agent=name,
                    inputs=inputs,
                    run_id=options["run_id"],
                    max_resumes=options["max_resumes"],
                    by=transitions.cli_actor(),
                    reason="started from the command line",
                )
                if not options["inline"]:
                    tasks.enqueue_start(run.run_id)
        except (NotJSON, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if options["inline"]:
            execute_inline(run.run_id, self.stdout)
        else:
            self.stdout.write(f"run {run.run_id}: queued for a worker")
