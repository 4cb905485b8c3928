"""Run a command against PostgreSQL: DATABASE_URL when set, else a throwaway server.

    python harness/with_postgres.py pytest -q

The suite never falls back to a fake. Without DATABASE_URL this starts a private PostgreSQL
cluster in a temporary directory from the local binaries (initdb/pg_ctl on PATH or under
/usr/lib/postgresql), and failing that from the pip-installable ``pgserver`` package; it stops
and deletes the cluster when the command ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from harness.servers import PostgresServer, end_with_parent, postgres_bindir


def _start_local(root: Path) -> tuple[str, list[str]] | None:
    bindir = postgres_bindir()
    if bindir is None:
        return None
    # Tests run with fsync off (speed, nothing to keep); a benchmark asks for fsync on
    # (WITH_POSTGRES_FSYNC=on) so that a commit costs what it costs in production.
    fsync = os.environ.get("WITH_POSTGRES_FSYNC", "off")
    server = PostgresServer(root, bindir=bindir, fsync=fsync).start()
    return server.url, server.stop_command()


def _start_pgserver(root: Path) -> tuple[str, list[str]]:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pgserver"], check=True)
    import pgserver  # type: ignore[import-not-found]

    server = pgserver.get_server(str(root / "pgdata"), cleanup_mode="stop")
    return server.get_uri(), []


def main(argv: list[str]) -> int:
    if os.environ.get("DATABASE_URL"):
        return subprocess.call(argv)
    root = Path(tempfile.mkdtemp(prefix="runledger-pg-"))
    local = None if os.environ.get("RUNLEDGER_TEST_PG") == "embedded" else _start_local(root)
    url, stop = local or _start_pgserver(root)
    print(f"with_postgres: throwaway PostgreSQL at {url}", flush=True)
    try:
        # The command ends with this process (SIGTERM), the server with a watchdog (servers.py).
        environ = {**os.environ, "DATABASE_URL": url}
        return subprocess.call(argv, env=environ, preexec_fn=end_with_parent)
    finally:
        if stop:
            subprocess.run(stop, stdout=subprocess.DEVNULL, check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
