"""``manage.py prune_runs --finished-before 30d``: retention of finished runs' step rows.

Archives the step rows of runs that finished (succeeded, failed, cancelled) before the cutoff to
``RUNLEDGER_ARCHIVE_DIR/<YYYY-MM>/<run_id>.jsonl.gz`` and deletes them in batches; the run
rows, their outcomes, settlements and the audit stay. See ledger/retention.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ledger import transitions
from ledger.processes import retention

AGE = re.compile(r"^(\d+)([dhm])$")
UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_cutoff(text: str, *, now: datetime) -> datetime:
    """``30d``, ``12h``, ``90m`` before now, or an ISO date/time (UTC when it names no zone)."""
    match = AGE.match(text.strip())
    if match:
        return now - timedelta(**{UNITS[match.group(2)]: int(match.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise CommandError(
            f"--finished-before {text!r}: give an age (30d, 12h, 90m) or an ISO date (2026-11-01)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Archive the step rows of finished runs to compressed JSON lines, then delete them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--finished-before", required=True, help="30d, 12h, or a date")
        parser.add_argument("--archive-dir", default=None, help="default RUNLEDGER_ARCHIVE_DIR")
        parser.add_argument("--batch", type=int, default=1000, help="rows deleted per commit")
        parser.add_argument("--max-runs", type=int, default=1000, help="runs in this pass")

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = parse_cutoff(options["finished_before"], now=timezone.now())
        if options["batch"] < 1 or options["max_runs"] < 1:
            raise CommandError("--batch and --max-runs must be at least 1")
        directory = Path(options["archive_dir"] or settings.RUNLEDGER_ARCHIVE_DIR)
        done = retention.prune_finished(
            finished_before=cutoff,
            directory=directory,
            by=transitions.cli_actor(),
            batch=options["batch"],
            max_runs=options["max_runs"],
        )
        self.stdout.write(
            f"pruned {done.runs} runs finished before {cutoff:%Y-%m-%d %H:%M} UTC: "
            f"{done.archived} step rows archived to {directory}, {done.deleted} deleted, "
            f"{done.kept} kept (settlement evidence)"
        )
        for run_id in done.skipped:
            self.stdout.write(f"  {run_id} changed while it was archived; left for the next pass")
