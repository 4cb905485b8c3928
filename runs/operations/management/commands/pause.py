"""Pause a tool (in every agent), an agent or a run: `manage.py pause --tool refund_charge
--reason "the provider is down"`.

A run that reaches a step of the paused tool (or any step of the paused agent or run) stops
``paused``, costing no resume budget, until `manage.py unpause` lifts the pause. Audited as
``cli:<login>``. Exit 0 when paused, 1 when refused (unknown target, already paused).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from runs.operations.commands import OperatorCommand, act, add_reason, text_arg


class Command(OperatorCommand):
    help = "Pause a tool, an agent or a run (a reason is required, for the audit)."

    def add_arguments(self, parser: CommandParser) -> None:
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--tool", type=text_arg, help="a tool's name: paused in every agent")
        what.add_argument("--agent", type=text_arg, help="an agent's name: all its runs")
        what.add_argument("--run", type=text_arg, help="one run's id")
        add_reason(parser, None)

    def handle(self, *args: Any, **options: Any) -> None:
        scope = next(s for s in ("tool", "agent", "run") if options[s] is not None)
        target = options[scope]
        pause = act(
            target,
            lambda: transitions.pause_create(
                scope=scope, target=target, by=transitions.cli_actor(), reason=options["reason"]
            ),
        )
        self.stdout.write(
            f"pause {pause.pk}: {scope} {target} paused; runs reaching it stop paused "
            f"(lift it with: unpause {pause.pk} --reason …)"
        )
