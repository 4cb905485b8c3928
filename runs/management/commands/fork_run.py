"""Fork a run at a step: `manage.py fork_run run_… --step refund --reason "…" [--inline]`.

The fork is a new run of the same agent and inputs whose ledger is a copy of the old one up to
and including the step (every copied row succeeded; copied effects replay, never sent again).
Audited on both runs as ``cli:<login>``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from runs import tasks
from runs.management.commands._common import (
    OperatorCommand,
    act,
    add_reason,
    add_where,
    execute_inline,
)


class Command(OperatorCommand):
    help = "Start a new run whose ledger is this run's up to a step (copied effects replay)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--step", required=True, help="the last step to copy")
        add_reason(parser, None)
        add_where(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        fork = act(
            run_id,
            lambda: transitions.run_fork(
                run_id=run_id,
                step_id=options["step"],
                by=transitions.cli_actor(),
                reason=options["reason"],
                on_commit=None if options["inline"] else tasks.enqueue_start,
            ),
        )
        self.stdout.write(f"fork {fork.run_id} of {run_id} at step {options['step']}")
        if options["inline"]:
            execute_inline(fork.run_id, self.stdout)
