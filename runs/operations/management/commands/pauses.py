"""List pauses and the runs each holds: `manage.py pauses` (active), `--all` (lifted too)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import selectors
from runs.operations.commands import OperatorCommand


class Command(OperatorCommand):
    help = "List the active pauses (--all: lifted ones too) and how many runs each holds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="lifted pauses too")

    def handle(self, *args: Any, **options: Any) -> None:
        pauses = selectors.pauses_list(active=not options["all"])[:500]
        if not pauses:
            self.stdout.write("no pauses" if options["all"] else "no active pauses")
            return
        self.stdout.write(f"{'id':>5} {'scope':<6} {'target':<28} {'held':>5}  since / by / why")
        for p in pauses:
            state = f"lifted by {p.lifted_by}, {p.requeued} queued" if p.lifted_at else "active"
            self.stdout.write(
                f"{p.pk:>5} {p.scope:<6} {p.target[:28]:<28} {p.held:>5}  "
                f"{p.created_at:%Y-%m-%d %H:%M} {p.created_by}: {p.reason[:60]} ({state})"
            )
