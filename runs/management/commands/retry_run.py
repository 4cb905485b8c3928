"""Retry a failed run: `manage.py retry_run run_… [--reason …] [--max-resumes N] [--inline]`.

The resume replays what succeeded and executes the failed step again (attempt + 1, the same
effect key for an effect). Audited as ``cli:<login>``. Exit codes: see ``_common``.
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
    help = "Retry a failed run: replay what succeeded, execute the failed step again."

    def add_arguments(self, parser: CommandParser) -> None:
        add_requeue_arguments(parser)
        add_reason(parser, "retried from the command line")

    def handle(self, *args: Any, **options: Any) -> None:
        requeue_command(
            self, options, transition=transitions.run_retry, reason="retried from the command line"
        )
