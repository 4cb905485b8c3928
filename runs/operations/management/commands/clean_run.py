"""Replace a stopped run by a clean one: `manage.py clean_run run_… --reason "…" [--inline]`.

The way forward from a divergence under ``refuse``: a new run of the same agent and inputs with
an empty ledger, its parent the old run (lineage ``clean``); the old run is cancelled if it had
not finished. Refused while an effect of the old run is unsettled. Audited on both runs as
``cli:<login>``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from typing import Any

from ledger import transitions
from ledger.models import Run
from runs.operations.commands import NewRunCommand


class Command(NewRunCommand):
    help = "Start a clean run with a stopped run's inputs (lineage-linked); cancel the old one."

    def handle(self, *args: Any, **options: Any) -> None:
        self.start_new(options, transitions.run_start_clean, seen_version=None)

    def describe(self, new: Run, options: dict[str, Any]) -> str:
        return f"clean run {new.run_id} replaces {options['run_id']}"
