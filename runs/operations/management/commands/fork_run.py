"""Fork a run at a step: `manage.py fork_run run_… --step refund --reason "…" [--inline]`.

The fork is a new run of the same agent and inputs whose ledger is a copy of the old one up to
and including the step (every copied row succeeded; copied effects replay, never sent again).
Audited on both runs as ``cli:<login>``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from ledger.models import Run
from runs.operations.commands import NewRunCommand


class Command(NewRunCommand):
    help = "Start a new run whose ledger is this run's up to a step (copied effects replay)."

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--step", required=True, help="the last step to copy")

    def handle(self, *args: Any, **options: Any) -> None:
        self.start_new(options, transitions.run_fork, step_id=options["step"])

    def describe(self, new: Run, options: dict[str, Any]) -> str:
        return f"fork {new.run_id} of {options['run_id']} at step {options['step']}"
