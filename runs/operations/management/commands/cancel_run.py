"""Cancel a run for good: `manage.py cancel_run run_… --reason "…"`.

A worker executing it loses its lease and can commit nothing more. Audited as ``cli:<login>``.
Exit 0 when the run is cancelled, 1 when refused (it had finished, no such run).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from runs.operations.commands import OperatorCommand, act, add_reason, text_arg


class Command(OperatorCommand):
    help = "Cancel a run that has not finished (a reason is required, for the audit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)
        add_reason(parser, None)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        run = act(
            run_id,
            lambda: transitions.run_cancel(
                run_id=run_id,
                by=transitions.cli_actor(),
                reason=options["reason"],
                seen_version=None,
            ),
        )
        self.stdout.write(f"run {run.run_id}: {run.status}")
