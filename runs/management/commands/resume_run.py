"""Resume a stopped run: `manage.py resume_run run_… [--max-resumes 8] [--reason …] [--inline]`.

Audited like the dashboard's Resume: the audit row names the actor ``cli:<login>``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import transitions
from ledger.errors import OperationError
from ledger.models import Run
from runs import tasks
from runs.management.commands._common import execute_inline, text_arg, whole_number


class Command(BaseCommand):
    help = "Queue a stopped run (needs attention, failed) to resume from its ledger."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)
        parser.add_argument(
            "--max-resumes", type=whole_number(), help="raise the run's resume budget to this many"
        )
        parser.add_argument(
            "--reason",
            default="resumed from the command line",
            help="why, for the audit (default: %(default)s)",
        )
        how = parser.add_mutually_exclusive_group()
        how.add_argument(
            "--enqueue", action="store_true", help="send it to a Celery worker (the default)"
        )
        how.add_argument("--inline", action="store_true", help="execute it in this process")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        try:
            transitions.run_resume(
                run_id=run_id,
                by=transitions.cli_actor(),
                reason=options["reason"],
                seen_version=None,
                max_resumes=options["max_resumes"],
                on_commit=None if options["inline"] else tasks.enqueue_resume,
            )
        except Run.DoesNotExist as exc:
            raise CommandError(f"no run {run_id}") from exc
        except OperationError as exc:
            raise CommandError(str(exc)) from exc
        if options["inline"]:
            execute_inline(run_id, self.stdout)
        else:
            self.stdout.write(f"run {run_id}: queued to resume")
