"""Replace a stopped run by a clean one: `manage.py clean_run run_… --reason "…" [--inline]`.

The way forward from a divergence under ``refuse``: a new run of the same agent and inputs with
an empty ledger, its parent the old run (lineage ``clean``); the old run is cancelled if it had
not finished. Refused while an effect of the old run is unsettled. Audited on both runs as
``cli:<login>``. Exit codes: see ``_common``.
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
    help = "Start a clean run with a stopped run's inputs (lineage-linked); cancel the old one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        add_reason(parser, None)
        add_where(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        new = act(
            run_id,
            lambda: transitions.run_start_clean(
                run_id=run_id,
                by=transitions.cli_actor(),
                reason=options["reason"],
                seen_version=None,
                on_commit=None if options["inline"] else tasks.enqueue_start,
            ),
        )
        self.stdout.write(f"clean run {new.run_id} replaces {run_id}")
        if options["inline"]:
            execute_inline(new.run_id, self.stdout)
