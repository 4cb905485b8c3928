"""`make killtest`: SIGKILL real Celery workers mid-run and check results and effects.

Runs in a database of its own (``<NAME>_killtest``, created and dropped here) on the PostgreSQL
server of DATABASE_URL. The last line of output is the summary the issue asks for.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
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
        write(f"    reproduce: RUNLEDGER_HARNESS=1 {replay} --only {trial.index}")


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
    print_failures(stdout.write, report, f"manage.py {name} --seed {seed}")
    stdout.write(f"{name}: {report.elapsed:.0f}s")
    stdout.write(report.recovery_line())
    stdout.write(summary)
    stdout.flush()
    if report.failures:
        sys.exit(1)


class Command(BaseCommand):
    help = "Kill real Celery workers at crash points and at random; check recovery is exact."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--trials", type=int, default=int(os.environ.get("KILLTEST_TRIALS", "200"))
        )
        parser.add_argument("--seed", type=int, help="replay the plan of an earlier run")
        parser.add_argument("--only", type=int, help="run just this trial of the plan")
        parser.add_argument("--parallel", type=int, default=4, help="victim workers at once")
        parser.add_argument(
            "--lease-seconds", type=float, default=2.0, help="the workers' lease (short: fast)"
        )
        parser.add_argument("--sweep-seconds", type=float, default=0.5, help="beat's interval")

    def handle(self, *args: Any, **options: Any) -> None:
        seed = seed_of(options)
        self.stdout.write(
            f"killtest: seed={seed} trials={options['trials']} lease={options['lease_seconds']}s "
            f"sweep={options['sweep_seconds']}s"
        )
        with scratch("killtest") as root:
            report = killtest.run(
                trials=options["trials"],
                seed=seed,
                root=root,
                parallel=options["parallel"],
                only=options["only"],
                lease_seconds=options["lease_seconds"],
                sweep_seconds=options["sweep_seconds"],
                progress=self.stderr.write,
            )
        finish(self.stdout, report, name="killtest", seed=seed, summary=report.summary_line())
