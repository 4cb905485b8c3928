"""``manage.py prune_runs --finished-before 30d``: retention of finished runs' step rows.

Archives the step rows of runs that finished (succeeded, failed, cancelled) before the cutoff to
the archive store (``RUNLEDGER_ARCHIVE_DIR`` or ``RUNLEDGER_ARCHIVE_S3_BUCKET``), a file per
``--runs-per-file`` runs, and deletes them in batches; the run rows, their outcomes,
settlements and the audit stay. See ledger/processes/retention.py.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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
        parser.add_argument(
            "--archive-dir", default=None, help="a local directory instead of the archive store"
        )
        parser.add_argument("--batch", type=int, default=5000, help="rows deleted per commit")
        parser.add_argument(
            "--runs-per-file", type=int, default=2000, help="runs archived in one file"
        )
        parser.add_argument("--max-runs", type=int, default=None, help="default: all of them")
        parser.add_argument(
            "--budget", type=float, default=None, help="stop after this many seconds"
        )
        parser.add_argument(
            "--from-mark",
            action="store_true",
            help="start where the last pass got (as beat does), not at the oldest finished run",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = parse_cutoff(options["finished_before"], now=timezone.now())
        max_runs = options["max_runs"]
        sizes = (options["batch"], options["runs_per_file"], 1 if max_runs is None else max_runs)
        if min(sizes) < 1 or (options["budget"] is not None and options["budget"] <= 0):
            raise CommandError(
                "--batch, --runs-per-file and --max-runs must be at least 1, --budget above 0"
            )
        store = (
            retention.DirectoryStorage(location=Path(options["archive_dir"]))
            if options["archive_dir"]
            else retention.archive_store()
        )
        done = retention.prune_finished(
            finished_before=cutoff,
            store=store,
            by=transitions.cli_actor(),
            batch=options["batch"],
            runs_per_file=options["runs_per_file"],
            max_runs=options["max_runs"],
            budget=options["budget"],
            from_mark=options["from_mark"],
        )
        rate = done.runs / done.seconds if done.seconds > 0 else 0.0
        self.stdout.write(
            f"pruned {done.runs} runs finished before {cutoff:%Y-%m-%d %H:%M} UTC: "
            f"{done.archived} step rows archived to {retention.describe(store)} in "
            f"{done.files} files, {done.deleted} deleted, {done.kept} kept (settlement "
            f"evidence); {done.seconds:.1f} s, {rate:.0f} runs/s"
        )
        if done.more:
            self.stdout.write("  more runs are left to prune (--max-runs or --budget): run again")
        for run_id in done.skipped:
            self.stdout.write(f"  {run_id} changed while it was archived; left for the next pass")
