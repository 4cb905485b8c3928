"""Lift a pause and queue every run it holds: `manage.py unpause 3 --reason "it is back"`.

Without ``--yes`` it only says how many runs the lift would queue (and which) and writes
nothing; ``--yes`` lifts it, refusing if the count changed since (``--expect N`` to state the
count you saw). Audited as ``cli:<login>``, with the count. Exit 0 when lifted (or shown), 1
when refused.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import selectors, transitions
from ledger.models import Pause
from runs.operations.commands import (
    EXIT_REFUSED,
    OperatorCommand,
    act,
    add_reason,
    bounded_int,
)

SHOWN = 20


class Command(OperatorCommand):
    help = "Lift a pause: show how many runs it holds, then (--yes) queue them all."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pause_id", type=bounded_int(1, 2**62), help="see `pauses`")
        parser.add_argument("--yes", action="store_true", help="lift it and queue the runs")
        parser.add_argument(
            "--expect",
            type=bounded_int(0, 10**9),
            help="the count of held runs you saw; refused if it differs",
        )
        add_reason(parser, None)

    def handle(self, *args: Any, **options: Any) -> None:
        pause_id = options["pause_id"]
        pause = Pause.objects.filter(pk=pause_id).first()
        if pause is None:
            raise CommandError(f"no pause {pause_id}", returncode=EXIT_REFUSED)
        held = list(selectors.pause_held(pause_id).values_list("run_id", flat=True))
        if not options["yes"]:
            self.stdout.write(
                f"pause {pause_id} ({pause.scope} {pause.target}) holds {len(held)} runs; "
                f"run again with --yes to lift it and queue them"
            )
            for run_id in held[:SHOWN]:
                self.stdout.write(f"  {run_id}")
            if len(held) > SHOWN:
                self.stdout.write(f"  … and {len(held) - SHOWN} more")
            return
        expected = options["expect"]
        lifted = act(
            "",
            lambda: transitions.pause_lift(
                pause_id=pause_id,
                by=transitions.cli_actor(),
                reason=options["reason"],
                expected=expected,
            ),
        )
        self.stdout.write(f"pause {pause_id} lifted: {lifted.requeued} runs queued for a worker")
