"""Private database and broker servers that a fault test may stop and restart at will.

Never the shared ones: each server here runs on a free loopback port, from files under a
directory the caller owns, and is removed by ``stop()``. PostgreSQL comes from the local
binaries (``initdb``/``pg_ctl``; run as the ``postgres`` user when the caller is root), Redis
from ``redis-server`` (no persistence: a restart loses every queued message, the worst case).
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: Linux sends the child SIGKILL when the process that started it dies (a
    killed test run leaves no worker, beat or server behind). Elsewhere, nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def end_with_parent() -> None:
    """``preexec_fn``: as ``die_with_parent`` with SIGTERM, for a child that cleans up (a test
    run that stops its own servers)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


#: The watchdog of a server that does not stay a child (pg_ctl starts PostgreSQL detached): it
#: blocks on a pipe whose other end only its parent holds, and when that parent is gone (how
#: ever it died) runs the stop command and removes the server's files.
_WATCHDOG = """
import json, os, shutil, subprocess, sys
fd, stop, root = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
while os.read(fd, 1):
    pass
subprocess.run(stop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
shutil.rmtree(root, ignore_errors=True)
"""


def watch_parent(stop: list[str], root: Path) -> None:
    """Stop a detached server and remove ``root`` when this process dies: a watchdog process
    in a session of its own, holding the read end of a pipe this process alone writes."""
    read, write = os.pipe()  # neither end is inherited by other children (non-inheritable)
    subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(read), json.dumps(stop), str(root)],
        pass_fds=(read,), start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(read)
    _WATCHED.append(write)  # held open until this process exits


_WATCHED: list[int] = []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, *, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def postgres_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(candidates[0]).parent if candidates else None


def as_postgres_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; run it as the postgres user when there is one."""
    if os.geteuid() == 0 and shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


class PostgresServer:
    """A throwaway PostgreSQL cluster: ``start()``, ``restart()``, ``stop()``; ``url``."""

    def __init__(self, root: Path, *, bindir: Path | None = None, fsync: str = "off") -> None:
        found = bindir or postgres_bindir()
        if found is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
        self.bindir, self.root, self.port, self.fsync = found, root, free_port(), fsync
        self.data = root / "data"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self._watched = False

    def _ctl(self, *args: str) -> None:
        cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(as_postgres_user(cmd), check=True, stdout=subprocess.DEVNULL)

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.root, "postgres")
            initdb = [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres"]
            subprocess.run(
                as_postgres_user([*initdb, "-A", "trust"]), check=True, stdout=subprocess.DEVNULL
            )
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync={self.fsync}"
        if not self._watched:  # pg_ctl detaches the server: stopped if this process dies
            watch_parent(self.stop_command(), self.root)
            self._watched = True
        self._ctl("-o", opts, "-w", "-l", str(self.root / "log"), "start")
        return self

    def stop_command(self) -> list[str]:
        """The command that stops this server at once (for a caller that outlives this object)."""
        cmd = [str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]
        return as_postgres_user(cmd)

    def stop(self, *, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash, no checkpoint, every client cut)."""
        self._ctl("-m", mode, "-w", "stop")

    def restart(self, *, mode: str = "immediate") -> None:
        self.stop(mode=mode)
        self.start()

    def remove(self) -> None:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run(self.stop_command(), check=False, **quiet)  # type: ignore[call-overload]
        shutil.rmtree(self.root, ignore_errors=True)


class RedisServer:
    """A private ``redis-server`` on a free port, without persistence."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("no redis-server on this machine")
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root / "redis.log", "ab")  # noqa: SIM115 - the child owns it
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        self.proc = subprocess.Popen(
            [binary, *args, "no", "--dir", str(self.root)],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        log.close()
        wait_for_port(self.port)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()
