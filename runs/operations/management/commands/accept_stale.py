"""Accept a stale step's stored result for today's inputs:
`manage.py accept_stale run_… --reason "…" [--step STEP] [--no-resume]`.

The command line's form of the dashboard's "Accept the stored result" on the stale page (after
a deploy changed a prompt or a tool argument that a run's recorded step was computed from):
today's inputs and their hash are recorded on the step, the stored result is kept, and the run
is queued to resume, replaying it. See the diff first with ``show_run`` or ``check_deploy``.
Audited as ``cli:<login>``. Exit 0 accepted, 1 refused (nothing written: not stale, no such run
or step, the run is running).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from ledger.processes.stale import accept_stale
from runs.operations.commands import OperatorCommand, act, add_reason, text_arg


class Command(OperatorCommand):
    help = (
        "Accept a stale step's stored result for today's inputs (the run's stale step unless "
        "--step names one) and queue the run to resume."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)
        parser.add_argument("--step", type=text_arg, help="the step (default: the stale one)")
        parser.add_argument(
            "--no-resume", action="store_true", help="record it, leave the run stopped"
        )
        add_reason(parser, None)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        step = act(
            run_id,
            lambda: accept_stale(
                run_id=run_id,
                step_id=options["step"],
                by=transitions.cli_actor(),
                reason=options["reason"],
                resume=not options["no_resume"],
            ),
        )
        status = type(step.run).objects.values_list("status", flat=True).get(pk=run_id)
        self.stdout.write(f"run {run_id}: accepted the stored result of {step.step_id}; {status}")
