"""How long recovery takes under production stress (issue 24), with real ``runledger worker``
processes, beat and a private PostgreSQL:

- ``host``: two hosts of ``--concurrency`` slots, ``--runs`` slow runs queued (``--hold`` s
  each), host a SIGKILLed: seconds from the kill until the sweep re-queued its orphans and until
  host b claimed them, and how many runs still waited then;
- ``database``: the same workload run twice, once undisturbed and once with PostgreSQL stopped
  for ``--down`` s (immediate: a crash) while runs are queued and running: the time lost beyond
  the outage itself (the second run's length, minus the first's, minus the outage).

Prints ``name: value unit`` lines. ``--lease``/``--sweep`` default to production's (30 s, 10 s).
Needs PostgreSQL binaries (initdb, pg_ctl) and RUNLEDGER_HARNESS=1:

    python harness/with_postgres.py python manage.py bench_recovery
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from harness import recovery
from harness.cluster import Cluster, wait_for
from harness.servers import PostgresServer


class Command(BaseCommand):
    help = "Recovery time with a deep queue and time lost to a database restart, measured."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scenarios", default="host,database")
        parser.add_argument("--runs", type=int, default=240)
        parser.add_argument("--db-runs", type=int, default=40)
        parser.add_argument("--hold", type=float, default=1.0, help="seconds of a run's slow step")
        parser.add_argument("--concurrency", type=int, default=2, help="slots per host")
        parser.add_argument("--lease", type=float, default=30.0)
        parser.add_argument("--sweep", type=float, default=10.0)
        parser.add_argument("--down", type=float, default=6.0, help="seconds the database is down")

    def handle(self, *args: Any, **options: Any) -> None:
        server = PostgresServer(Path(tempfile.mkdtemp(prefix="runledger-bench-pg-"))).start()
        try:
            with recovery.default_database(server):
                for scenario in options["scenarios"].split(","):
                    getattr(self, f"_{scenario}")(server, options)
        finally:
            server.remove()

    def _cluster(self, root: Path, options: dict[str, Any]) -> Cluster:
        return Cluster(
            root,
            lease_seconds=options["lease"],
            sweep_seconds=options["sweep"],
            lost_after=3600.0,
            env={"RUNLEDGER_AGENT_MODULES": recovery.MODULES},
        )

    def _say(self, name: str, value: float | int, unit: str = "") -> None:
        shown = f"{value:.1f}" if isinstance(value, float) else str(value)
        self.stdout.write(f"{name}: {shown} {unit}".rstrip())

    def _host(self, server: PostgresServer, options: dict[str, Any]) -> None:
        with (
            tempfile.TemporaryDirectory() as tmp,
            self._cluster(Path(tmp), options) as cluster,
        ):
            lost = recovery.lose_a_host_under_a_deep_queue(
                cluster,
                runs=options["runs"],
                hold=options["hold"],
                concurrency=options["concurrency"],
                timeout=600,
            )
            recovery.cancel_backlog(lost.run_ids, keep=lost.orphans)
            wait_for(lambda: recovery.all_final(lost.orphans), timeout=600)
        self._say("host_lost.queued_at_kill", lost.queued_at_kill, "runs")
        self._say("host_lost.orphans", len(lost.orphans), "runs")
        self._say("host_lost.bound", options["lease"] + options["sweep"], "s (lease + sweep)")
        self._say("host_lost.requeued_after", lost.requeued_after, "s")
        self._say("host_lost.taken_over_after", lost.taken_after, "s")
        self._say("host_lost.queued_at_takeover", lost.queued_at_takeover, "runs")

    def _database(self, server: PostgresServer, options: dict[str, Any]) -> None:
        with (
            tempfile.TemporaryDirectory() as tmp,
            self._cluster(Path(tmp), options) as cluster,
        ):
            cluster.beat()
            workers = ("w1", "w2")
            for name in workers:
                cluster.worker(name, concurrency=options["concurrency"])
            began = time.monotonic()
            ids = recovery.queue_slow_runs(cluster, options["db_runs"], hold=options["hold"])
            wait_for(lambda: recovery.all_final(ids), timeout=600, interval=0.2)
            undisturbed = time.monotonic() - began
            began = time.monotonic()
            restart = recovery.restart_database_under_runs(
                cluster,
                server,
                runs=options["db_runs"],
                hold=options["hold"],
                workers=workers,
                stay_down=lambda: time.sleep(options["down"]),
                timeout=600,
            )
            disturbed = time.monotonic() - began
        self._say("database.runs", len(restart.run_ids), "runs")
        self._say("database.queued_at_stop", restart.queued_at_stop, "runs")
        self._say("database.running_at_stop", restart.running_at_stop, "runs")
        self._say("database.down", restart.down_seconds, "s")
        self._say("database.undisturbed", undisturbed, "s (the same runs, no restart)")
        self._say("database.with_restart", disturbed, "s")
        self._say(
            "database.lost_beyond_the_outage", disturbed - undisturbed - restart.down_seconds, "s"
        )
        self._say("database.done_after_return", restart.done_after, "s")
        self._say("database.retries", restart.retries, "tasks sent again with back-off")
