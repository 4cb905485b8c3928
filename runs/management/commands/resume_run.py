"""Resume a stopped run: `manage.py resume_run run_… [--max-resumes 8] [--reason …] [--inline]`.

Audited like the dashboard's Resume: the audit row names the actor ``cli:<login>``. Refused
(exit 1, no resume spent) when the dry replay says the run would stop again at once, unless
``--anyway``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ledger import transitions
from runs.management.commands._common import (
    OperatorCommand,
    add_reason,
    add_requeue_arguments,
    requeue_command,
)


class Command(OperatorCommand):
    help = "Queue a stopped run (needs attention, failed) to resume from its ledger."

    def add_arguments(self, parser: CommandParser) -> None:
        add_requeue_arguments(parser)
        add_reason(parser, "resumed from the command line")

    def handle(self, *args: Any, **options: Any) -> None:
        requeue_command(
            self, options, transition=transitions.run_resume, reason="resumed from the command line"
        )
