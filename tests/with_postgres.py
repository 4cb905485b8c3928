"""Run a command against PostgreSQL: DATABASE_URL when set, else a throwaway server.

    python tests/with_postgres.py pytest -q

The suite never falls back to a fake. Without DATABASE_URL this starts a private PostgreSQL
cluster in a temporary directory from the local binaries (initdb/pg_ctl on PATH or under
/usr/lib/postgresql), and failing that from the pip-installable ``pgserver`` package; it stops
and deletes the cluster when the command ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def _as_user(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; run it as the postgres user when there is one.
    if os.geteuid() == 0 and shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _start_local(bindir: Path, root: Path) -> tuple[str, list[str]]:
    data, port = root / "data", _free_port()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    subprocess.run(
        _as_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    # Tests run with fsync off (speed, nothing to keep); a benchmark asks for fsync on
    # (WITH_POSTGRES_FSYNC=on) so that a commit costs what it costs in production.
    fsync = os.environ.get("WITH_POSTGRES_FSYNC", "off")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync={fsync}"
    subprocess.run(
        _as_user(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                opts,
                "-w",
                "-l",
                str(root / "log"),
                "start",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stop = _as_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
    return f"postgres://postgres@127.0.0.1:{port}/postgres", stop


def _start_pgserver(root: Path) -> tuple[str, list[str]]:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "pgserver"], check=True)
    import pgserver  # type: ignore[import-not-found]

    server = pgserver.get_server(str(root / "pgdata"), cleanup_mode="stop")
    return server.get_uri(), []


def main(argv: list[str]) -> int:
    if os.environ.get("DATABASE_URL"):
        return subprocess.call(argv)
    root = Path(tempfile.mkdtemp(prefix="runledger-pg-"))
    bindir = None if os.environ.get("RUNLEDGER_TEST_PG") == "embedded" else _local_bindir()
    url, stop = _start_local(bindir, root) if bindir else _start_pgserver(root)
    print(f"with_postgres: throwaway PostgreSQL at {url}", flush=True)
    try:
        return subprocess.call(argv, env={**os.environ, "DATABASE_URL": url})
    finally:
        if stop:
            subprocess.run(stop, stdout=subprocess.DEVNULL, check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
