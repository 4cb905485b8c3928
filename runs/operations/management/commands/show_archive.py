"""``manage.py show_archive run_… | PATH``: a pruned run's ledger, loaded back from its archive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        path = Path(archive.location) if archive else Path(target)
        if not path.is_file():
            raise CommandError(f"{target!r} is neither a pruned run nor an archive file")
        if archive and retention.file_sha256(path) != archive.sha256:
            raise CommandError(f"{path} does not match the digest recorded when it was written")
        try:
            rows = retention.read_archive(path)
            header = next(rows)
            self.stdout.write(f"archive of run {header['run_id']}: {header['steps']} steps")
            for row in rows:
                self.stdout.write(json.dumps(row, sort_keys=True) if options["json"] else _row(row))
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None


def _row(row: dict[str, Any]) -> str:
    result = json.dumps(row.get("result"), sort_keys=True)
    result = result if len(result) <= 60 else result[:59] + "…"
    return (
        f"{row['seq']:>4} {row['step_id']:<24} {row['kind']:<7} {row['status']:<10} "
        f"{row['attempt']:>3}  {row.get('effect_key') or result}"
    )
