"""The deployment behind PgBouncer in transaction mode (docs/platform/sizing.md): real Celery
workers and retention reach the test database only through a real PgBouncer (Debian's
package), with ``RUNLEDGER_PG_PREPARE=0`` and ``DATABASE_DISABLE_SERVER_SIDE_CURSORS=1``; every
run finishes, and PgBouncer's own statistics show that the traffic went through it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from harness.cluster import Cluster, database_url, wait_for
from harness.servers import as_postgres_user, free_port, wait_for_port
from ledger import transitions
from ledger.models import Run, RunArchive, Step
from runs.operations.tasks import start_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
WAIT = 180
POOLED = {"RUNLEDGER_PG_PREPARE": "0", "DATABASE_DISABLE_SERVER_SIDE_CURSORS": "1"}


@pytest.fixture
def pgbouncer() -> Iterator[tuple[str, int]]:
    """PgBouncer in transaction mode in front of the test database: (its DATABASE_URL, port)."""
    if shutil.which("pgbouncer") is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    if connection.vendor != "postgresql":
        pytest.skip("PgBouncer pools PostgreSQL connections")
    sd = connection.settings_dict
    root = Path(tempfile.mkdtemp(prefix="pgbouncer-"))  # readable by the postgres user
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    port, user = free_port(), sd["USER"]
    (root / "users.txt").write_text(f'"{user}" ""\n')
    (root / "pgbouncer.ini").write_text(
        f"[databases]\n{sd['NAME']} = host={sd['HOST']} port={sd['PORT']} dbname={sd['NAME']}\n"
        "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
        f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\n"
        f"auth_file = {root / 'users.txt'}\nadmin_users = {user}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
        f"logfile = {root / 'pgbouncer.log'}\npidfile = {root / 'pgbouncer.pid'}\n"
    )
    proc = subprocess.Popen(
        as_postgres_user(["pgbouncer", str(root / "pgbouncer.ini")]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_port(port, timeout=60)
        yield database_url({**sd, "HOST": "127.0.0.1", "PORT": port}), port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def _transactions_through(port: int, database: str) -> int:
    with psycopg.connect(
        f"host=127.0.0.1 port={port} dbname=pgbouncer user={connection.settings_dict['USER']}",
        autocommit=True,
    ) as admin:
        rows = admin.execute("SHOW STATS").fetchall()
    [count] = [row[1] for row in rows if row[0] == database]  # total_xact_count
    return int(count)


def test_workers_and_retention_run_through_pgbouncer_in_transaction_mode(
    pgbouncer: tuple[str, int], tmp_path: Path
) -> None:
    url, port = pgbouncer
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
        "PYTHONPATH": str(settings.BASE_DIR),
        "DATABASE_URL": url,
        **POOLED,
    }
    with Cluster(tmp_path / "cluster", lease_seconds=5.0, sweep_seconds=0.5, env=env) as cluster:
        cluster.worker("w1", concurrency=2)
        cluster.worker("w2", concurrency=2)
        runs = [
            transitions.run_start(agent="survey", inputs={"records": 300 + i}) for i in range(8)
        ]
        for run in runs:
            cluster.send(start_run, run.run_id)

        def done() -> bool:
            statuses = Run.objects.filter(pk__in=[r.run_id for r in runs])
            return all(s == "succeeded" for s in statuses.values_list("status", flat=True))

        assert wait_for(done, timeout=WAIT), cluster.log("w1") + cluster.log("w2")
    steps = {r.run_id: Step.objects.filter(run=r).count() for r in runs}
    assert all(count > 300 for count in steps.values()), steps
    assert _transactions_through(port, connection.settings_dict["NAME"]) > sum(steps.values())

    pruned = subprocess.run(
        [sys.executable, "manage.py", "prune_runs", "--finished-before", "2099-01-01",
         "--runs-per-file", "8", "--batch", "500"],
        cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=300,
        env={**cluster.env, "RUNLEDGER_ARCHIVE_DIR": str(tmp_path / "archive")},
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert "pruned 8 runs" in pruned.stdout
    assert not Step.objects.filter(run__in=runs).exists()
    assert {a.run_id: a.steps for a in RunArchive.objects.all()} == steps
