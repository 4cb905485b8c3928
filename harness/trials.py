"""What the kill test's and the soak's commands share: a scratch database and directory per
batch, the seed, and the closing lines (failures, time, recovery, summary, exit status)."""

from __future__ import annotations

import contextlib
import random
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.db import connection

from harness import killtest


@contextlib.contextmanager
def scratch_database(suffix: str) -> Iterator[None]:
    """A database of its own (``<NAME>_<suffix>``) on the server of DATABASE_URL, migrated
    here and dropped afterwards."""
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{old_name}_{suffix}"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        yield
    finally:
        # A worker's connection cut by a proxy or a killed process may linger a moment.
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connection.creation.destroy_test_db(old_name, verbosity=0)


def print_failures(write: Callable[[str], Any], report: killtest.Report, replay: str) -> None:
    for trial in report.failures:
        write(f"{report.summary_line().split(':')[0]}: FAILED {trial.describe()}")
        for problem in trial.problems:
            write(f"    {problem}")
        write(f"    reproduce: {replay} --only {trial.index}  (DATABASE_URL: a PostgreSQL)")


def require_postgres() -> None:
    if connection.vendor != "postgresql":
        raise CommandError(
            "the kill test runs against PostgreSQL: set DATABASE_URL "
            "(make killtest starts a throwaway server when it is unset)"
        )


def seed_of(options: dict[str, Any]) -> int:
    """After checking for PostgreSQL: the seed given (a replay), or a fresh one."""
    require_postgres()
    seed = options["seed"]
    return random.SystemRandom().randrange(1_000_000) if seed is None else int(seed)


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A database (``<NAME>_<name>``) and a temporary directory of the command's own."""
    with (
        scratch_database(name),
        tempfile.TemporaryDirectory(prefix=f"runledger-{name}-") as tmp,
    ):
        yield Path(tmp)


def finish(
    stdout: OutputWrapper, report: killtest.Report, *, name: str, seed: int, summary: str
) -> None:
    """The failures (each with how to replay it), the time, the recovery and ``summary``
    lines; exit 1 when a trial failed."""
    print_failures(stdout.write, report, f"runledger {name} --seed {seed}")
    stdout.write(f"{name}: {report.elapsed:.0f}s")
    stdout.write(report.recovery_line())
    stdout.write(summary)
    stdout.flush()
    if report.failures:
        sys.exit(1)
