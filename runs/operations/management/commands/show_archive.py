"""``manage.py show_archive run_… | PATH``: a pruned run's ledger, loaded back from its archive.

A run id is looked up in the ledger and its archive read from the archive store (the same
directory or bucket on any machine configured with it); a path is read as a local file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import selectors
from ledger.processes import retention


class Command(BaseCommand):
    help = "Print the step rows retention archived for a run (by run id or archive file)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_or_path")
        parser.add_argument("--json", action="store_true", help="every row whole, one per line")

    def handle(self, *args: Any, **options: Any) -> None:
        target: str = options["run_or_path"]
        archive = selectors.run_archive(run_id=target)
        source: IO[bytes] | Path
        if archive is not None:
            store = retention.archive_store()
            try:
                source, digest = retention.open_archive(archive.location, store=store)
            except Exception as exc:  # the store's own errors (OSError, botocore's) alike
                raise CommandError(
                    f"cannot read {archive.location} from {retention.describe(store)}: {exc}"
                ) from None
            if digest != archive.sha256:
                raise CommandError(
                    f"{archive.location} does not match the digest recorded when it was written"
                )
        elif Path(target).is_file():
            source = Path(target)
        else:
            raise CommandError(f"{target!r} is neither a pruned run nor an archive file")
        self._show(source, run_id=target if archive else None, whole=options["json"])

    def _show(self, source: IO[bytes] | Path, *, run_id: str | None, whole: bool) -> None:
        try:
            rows = retention.read_archive(source, run_id=run_id)
            header = next(rows)
            runs = header["runs"]
            if run_id is not None or len(runs) == 1:
                [(shown, steps)] = [(run_id, header["steps"])] if run_id else runs.items()
                self.stdout.write(f"archive of run {shown}: {steps} steps")
            else:
                self.stdout.write(f"archive of {len(runs)} runs: {header['steps']} steps")
            for row in rows:
                self.stdout.write(json.dumps(row, sort_keys=True) if whole else _row(row))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {source}: {exc}") from None


def _row(row: dict[str, Any]) -> str:
    result = json.dumps(row.get("result"), sort_keys=True)
    result = result if len(result) <= 60 else result[:59] + "…"
    return (
        f"{row['seq']:>4} {row['step_id']:<24} {row['kind']:<7} {row['status']:<10} "
        f"{row['attempt']:>3}  {row.get('effect_key') or result}"
    )
