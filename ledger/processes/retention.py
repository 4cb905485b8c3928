"""Retention: archive the step rows of finished runs to compressed JSON lines, then delete them.

``prune_finished`` works in batches of ``runs_per_file`` runs, oldest finished first, until none
is left, ``max_runs`` are done or its time ``budget`` is spent (checked between batches, so one
beat tick stays within about a batch of its budget). For each batch it writes every step row of
those runs to one file in the archive store, ``<YYYY-MM>/<time>-<token>.jsonl.gz`` (the month
the batch's oldest run finished), records the archive of each run
(``transitions.runs_archive_record``, with an audit row each), and deletes their rows ``batch``
at a time (``transitions.steps_delete_archived``, one short transaction each, so no lock is held
for long). Interrupted anywhere, running it again finishes the job: a run whose recorded
archive still describes it is only deleted from.

The archive store is a Django storage (``django.core.files.storage``), the one named
``runledger-archive`` in ``settings.STORAGES``: a local directory (``DirectoryStorage``, which
makes each file durable before naming it), or an S3-compatible bucket through django-storages
(``pip install 'runledger[s3]'``). An archive's ``location`` is its name in the store, so any
machine configured with the same store reads it back (``manage.py show_archive``).

A file's first line describes it (``{"archive": "runledger.steps/2", "runs": {run_id: rows},
"steps": N}``); each following line is one step row, its columns by name (times in ISO 8601),
ordered by run, then ``seq``. Files of the first format (``runledger.steps/1``, one run each,
at an absolute path) are still read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from ledger import selectors, transitions
from ledger.models import Run, RunArchive, Step

FORMAT = "runledger.steps/2"
FORMATS = ("runledger.steps/1", FORMAT)
#: The alias of the archive store in ``settings.STORAGES``.
ARCHIVE_STORAGE = "runledger-archive"
Clock = Callable[[], datetime]
Timer = Callable[[], float]


@dataclass
class Pruned:
    runs: int = 0
    archived: int = 0
    deleted: int = 0
    kept: int = 0
    files: int = 0
    seconds: float = 0.0
    more: bool = False  # stopped by max_runs or the budget with runs left to prune
    skipped: list[str] = field(default_factory=list)


class DirectoryStorage(FileSystemStorage):
    """A local directory as the archive store: each file is written aside, flushed to disk and
    renamed into place, so a name that exists is a complete file."""

    def _save(self, name: str, content: File) -> str:  # type: ignore[type-arg]
        path = Path(self.path(name))
        # An archive holds runs' full inputs and results: readable by the service's user only.
        root = Path(self.location)
        inside = [f for f in (path.parent, *path.parent.parents) if f == root or root in f.parents]
        root.parent.mkdir(parents=True, exist_ok=True)
        for folder in reversed(inside):  # the store's root first
            folder.mkdir(mode=0o700, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as out:
            for chunk in content.chunks():
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(draft, path)
        return name


def archive_store() -> Storage:
    """The configured archive store (``settings.STORAGES["runledger-archive"]``)."""
    return storages[ARCHIVE_STORAGE]


def describe(store: Storage) -> str:
    """Where a store keeps its files, as a person reads it."""
    bucket = getattr(store, "bucket_name", None)
    if bucket:
        prefix = getattr(store, "location", "")
        return f"s3://{bucket}/{prefix}".rstrip("/")
    return str(getattr(store, "location", store))


def prune_finished(
    *,
    finished_before: datetime,
    store: Storage,
    by: str,
    batch: int = 5000,
    runs_per_file: int = 2000,
    max_runs: int | None = None,
    budget: float | None = None,
    from_mark: bool = False,
    timer: Timer = time.monotonic,
    clock: Clock = timezone.now,
) -> Pruned:
    """Archive and delete the step rows of runs finished before the cutoff, a file of
    ``runs_per_file`` runs at a time, until none is left, ``max_runs`` are done, or ``budget``
    seconds (of ``timer``) have passed. ``from_mark`` starts the walk at retention's mark (the
    runs before it are done) instead of at the oldest finished run; either way the mark moves
    past each batch completed while no run was left behind."""
    done = Pruned()
    started = timer()
    after = selectors.retention_mark() if from_mark else None
    while True:
        limit = runs_per_file if max_runs is None else min(runs_per_file, max_runs - done.runs)
        out_of_time = budget is not None and timer() - started >= budget
        if limit <= 0 or out_of_time:
            done.more = bool(
                selectors.runs_to_prune(finished_before=finished_before, limit=1, after=after)
            )
            break
        runs = selectors.runs_to_prune(finished_before=finished_before, limit=limit, after=after)
        if not runs:
            break
        after = (runs[-1].finished_at or finished_before, runs[-1].run_id)
        skipped = len(done.skipped)
        _prune_batch(runs, store=store, by=by, batch=batch, reason=_reason(finished_before),
                     clock=clock, done=done)  # fmt: skip
        if len(done.skipped) == skipped == 0:  # nothing left behind so far: the mark moves
            transitions.retention_mark_advance(finished_at=after[0], run_id=after[1], clock=clock)
    done.seconds = timer() - started
    return done


def _prune_batch(
    runs: list[Run], *, store: Storage, by: str, batch: int, reason: str, clock: Clock, done: Pruned
) -> None:
    archives = selectors.run_archives(run_ids=[r.run_id for r in runs])
    fresh = [r for r in runs if _describes(archives.get(r.run_id), r)]
    stale = [r for r in runs if not _describes(archives.get(r.run_id), r)]
    recorded = [r.run_id for r in fresh]
    if stale:
        location, digest, counts = write_archive(runs=stale, store=store, clock=clock)
        done.files += 1
        versions = {r.run_id: r.version for r in stale}
        now_recorded = transitions.runs_archive_record(
            versions=versions, steps=counts, location=location, sha256=digest, by=by,
            reason=reason, clock=clock,
        )  # fmt: skip
        done.skipped.extend(sorted(set(versions) - set(now_recorded)))
        done.archived += sum(counts.get(run_id, 0) for run_id in now_recorded)
        recorded += now_recorded
    while deleted := transitions.steps_delete_archived(run_ids=recorded, limit=batch):
        done.deleted += deleted
        if deleted < batch:
            break
    done.runs += len(recorded)
    done.kept += Step.objects.filter(run_id__in=recorded).count()


def _describes(archive: RunArchive | None, run: Run) -> bool:
    return archive is not None and archive.run_version == run.version


def _reason(finished_before: datetime) -> str:
    return f"retention: finished before {finished_before.isoformat()}"


def archive_name(*, runs: Sequence[Run], clock: Clock = timezone.now) -> str:
    oldest = runs[0].finished_at or runs[0].updated_at
    return f"{oldest:%Y-%m}/{clock():%Y%m%dT%H%M%S}-{secrets.token_hex(6)}.jsonl.gz"


def write_archive(
    *, runs: Sequence[Run], store: Storage, clock: Clock = timezone.now
) -> tuple[str, str, dict[str, int]]:
    """Write every step row of ``runs`` to one new file in ``store``; (its name, the sha256 of
    the file, rows per run)."""
    ids = [r.run_id for r in runs]
    counts = dict(
        Step.objects.filter(run_id__in=ids)
        .order_by()
        .values("run_id")
        .annotate(n=Count("pk"))
        .values_list("run_id", "n")
    )
    digest = hashlib.sha256()
    with tempfile.TemporaryFile() as draft:
        hashing = _Hashing(draft, digest)
        with gzip.GzipFile(fileobj=hashing, mode="wb", mtime=0, compresslevel=1) as out:  # type: ignore[arg-type]
            header = {"archive": FORMAT, "runs": counts, "steps": sum(counts.values())}
            out.write(_line(header))
            for chunk in _step_lines(ids):
                out.write(chunk)
        draft.seek(0)
        name = store.save(archive_name(runs=runs, clock=clock), File(draft))
    return name, digest.hexdigest(), counts


def _step_lines(run_ids: list[str]) -> Iterator[bytes]:
    """The runs' step rows as JSON lines (bytes, in chunks), ordered by run, then ``seq``.

    On PostgreSQL the server writes the lines (``row_to_json``) and streams them with COPY: no
    row passes through the ORM (its converters and ``json.dumps`` were half the time of a
    prune). CSV with a quote and a delimiter that JSON never holds unescaped (0x01, 0x02)
    passes each line through as it is (COPY's text format would double every backslash)."""
    order = ("run_id", "seq", "pk")
    if connection.vendor != "postgresql":
        rows = Step.objects.filter(run_id__in=run_ids).order_by(*order).values()
        for row in rows.iterator(chunk_size=2000):
            yield _line(dict(row))
        return
    table = connection.ops.quote_name(Step._meta.db_table)
    columns = sorted(Step._meta.concrete_fields, key=lambda f: f.attname)
    picked = ", ".join(
        f"{connection.ops.quote_name(str(f.column))} AS {connection.ops.quote_name(f.attname)}"
        for f in columns
    )
    query = (
        f"COPY (SELECT row_to_json(s) FROM (SELECT {picked} FROM {table} "
        "WHERE run_id = ANY(%s) ORDER BY run_id, seq, id) s) "
        "TO STDOUT WITH (FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02')"
    )
    pending = bytearray()  # COPY hands over a row at a time: gzip and hash them in bulk
    with connection.cursor() as cursor, cursor.cursor.copy(query, (run_ids,)) as copy:
        for data in copy:
            pending += data
            if len(pending) >= 1 << 18:
                yield bytes(pending)
                pending.clear()
    yield bytes(pending)


class _Hashing(io.RawIOBase):
    """A writable file that hashes what passes through it."""

    def __init__(self, target: IO[bytes], digest: Any) -> None:
        self.target, self.digest = target, digest

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.digest.update(data)
        return self.target.write(data)


def open_archive(location: str, *, store: Storage) -> tuple[IO[bytes], str]:
    """An archive's bytes in a local temporary file and their sha256. ``location`` is a name in
    ``store`` or, for archives of the first format, an absolute path. Raises OSError (or the
    store's own error) when it cannot be read."""
    absolute = os.path.isabs(location)
    source: IO[bytes] = open(location, "rb") if absolute else store.open(location, "rb")  # noqa: SIM115
    digest = hashlib.sha256()
    local = tempfile.TemporaryFile()  # noqa: SIM115 (the caller's to close)
    with source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
            local.write(chunk)
    local.seek(0)
    return local, digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_archive(
    source: Path | IO[bytes], *, run_id: str | None = None
) -> Iterator[dict[str, Any]]:
    """An archive's header (``runs``: rows per run, ``steps``: rows shown), then its step rows
    one at a time (the file can be large), only ``run_id``'s when given.

    Raises ValueError for a file that is not a runledger step archive, OSError when it cannot
    be read (gzip.BadGzipFile for a file that is not gzip)."""
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        header = json.loads(handle.readline() or "{}")
        if not isinstance(header, dict) or header.get("archive") not in FORMATS:
            raise ValueError(f"{source} is not a runledger step archive ({FORMAT})")
        if "runs" not in header:  # the first format: one run
            header["runs"] = {header.get("run_id"): header.get("steps", 0)}
        if run_id is not None:
            if run_id not in header["runs"]:
                raise ValueError(f"the archive holds no rows of {run_id}")
            header = {**header, "run_id": run_id, "steps": header["runs"][run_id]}
        yield header
        for line in handle:
            row = json.loads(line)
            if run_id is None or row.get("run_id") == run_id:
                yield row


def _line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, default=_iso, sort_keys=True) + "\n").encode("utf-8")


def _iso(value: Any) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
