"""Retention: archive the step rows of finished runs to compressed JSON lines, then delete them.

``prune_finished`` handles one run at a time: it writes every step row of the run to
``<directory>/<YYYY-MM>/<run_id>.jsonl.gz`` (written aside, flushed to disk, renamed into
place), records the archive (``transitions.run_archive_record``, with an audit row), and
deletes the rows in batches of ``batch`` (``transitions.steps_delete_archived``, one short
transaction each, so no lock is held for long). Interrupted anywhere, running it again finishes
the job: a recorded archive whose rows are still there is only deleted from.

An archive file's first line describes it (``{"archive": "runledger.steps/1", "run_id": …,
"steps": N}``); each following line is one step row, its columns by name (times in ISO 8601).
``read_archive`` loads one back for inspection (``manage.py show_archive``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from ledger import selectors, transitions
from ledger.models import Run, Step

FORMAT = "runledger.steps/1"
Clock = Callable[[], datetime]


@dataclass
class Pruned:
    runs: int = 0
    archived: int = 0
    deleted: int = 0
    kept: int = 0
    skipped: list[str] = field(default_factory=list)


def prune_finished(
    *,
    finished_before: datetime,
    directory: Path,
    by: str,
    batch: int = 1000,
    max_runs: int = 1000,
    clock: Clock = timezone.now,
) -> Pruned:
    """Archive and delete the step rows of up to ``max_runs`` runs finished before the cutoff."""
    done = Pruned()
    for run in selectors.runs_to_prune(finished_before=finished_before, limit=max_runs):
        archive = selectors.run_archive(run_id=run.run_id)
        if archive is None or archive.run_version != run.version:
            location, digest, count = write_archive(run=run, directory=directory)
            archive = transitions.run_archive_record(
                run_id=run.run_id,
                location=str(location),
                sha256=digest,
                steps=count,
                run_version=run.version,
                by=by,
                reason=f"retention: finished before {finished_before.isoformat()}",
                clock=clock,
            )
            if archive is None:  # the run changed while its file was written: next time
                done.skipped.append(run.run_id)
                continue
            done.archived += count
        while deleted := transitions.steps_delete_archived(run_id=run.run_id, limit=batch):
            done.deleted += deleted
        done.runs += 1
        done.kept += Step.objects.filter(run_id=run.run_id).count()
    return done


def archive_path(*, run: Run, directory: Path) -> Path:
    finished = run.finished_at or run.updated_at
    return directory / f"{finished:%Y-%m}" / f"{run.run_id}.jsonl.gz"


def write_archive(*, run: Run, directory: Path) -> tuple[Path, str, int]:
    """Write every step row of ``run`` to its archive file; (path, sha256 of the file, rows)."""
    path = archive_path(run=run, directory=directory)
    # An archive holds a run's full inputs and results: readable by the service's user only.
    for folder in (directory, path.parent):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    rows = Step.objects.filter(run_id=run.run_id).order_by("seq", "pk").values()
    count = rows.count()
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            header = {"archive": FORMAT, "run_id": run.run_id, "steps": count}
            out.write(_line(header))
            for row in rows.iterator(chunk_size=2000):
                out.write(_line(dict(row)))
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(draft, path)
    return path, file_sha256(path), count


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_archive(path: Path) -> Iterator[dict[str, Any]]:
    """An archive's header, then its step rows one at a time (the file can be large).

    Raises ValueError for a file that is not a runledger step archive, OSError when it cannot
    be read (gzip.BadGzipFile for a file that is not gzip)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        header = json.loads(handle.readline() or "{}")
        if not isinstance(header, dict) or header.get("archive") != FORMAT:
            raise ValueError(f"{path} is not a runledger step archive ({FORMAT})")
        yield header
        for line in handle:
            yield json.loads(line)


def _line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, default=_iso, sort_keys=True) + "\n").encode("utf-8")


def _iso(value: Any) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
