"""Real Celery worker and beat processes on a private broker directory, for kill and race tests.

Each process is started in its own session (its own process group), so that a test can kill a
whole worker — parent and pool children — with one ``os.killpg``, as when a machine is lost.
The processes get the caller's database (``database_url`` of the live connection, so a test
database is shared) and a filesystem broker under ``root``, so concurrent suites never meet.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from celery import Task
from django.conf import settings
from django.db import connection

from runs.brokers import TRANSPORT as FILESYSTEM_TRANSPORT
from runs.brokers import filesystem_options
from runs.celery import app

_STRIPPED = ("RUNLEDGER_KILL_", "RUNLEDGER_HOLD_", "RUNLEDGER_EFFECT_MARGIN", "CELERY_")


def database_url(settings_dict: Mapping[str, Any] | None = None) -> str:
    """A DATABASE_URL for the database this process is connected to (e.g. pytest's test DB)."""
    sd = settings_dict if settings_dict is not None else connection.settings_dict
    if sd["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{sd['NAME']}"
    user, password = sd.get("USER") or "", sd.get("PASSWORD") or ""
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    host = quote(str(sd.get("HOST") or ""), safe="")
    port = f":{sd['PORT']}" if sd.get("PORT") else ""
    return f"postgres://{auth}{'@' if auth else ''}{host}{port}/{quote(sd['NAME'], safe='')}"


class Cluster:
    """Workers and a beat sharing one broker directory and one database."""

    def __init__(
        self,
        root: Path,
        *,
        lease_seconds: float = 2.0,
        sweep_seconds: float = 0.5,
        lost_after: float = 10.0,
        effect_margin: float | None = None,
        broker_url: str = "filesystem://localhost//",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.lease_seconds = lease_seconds
        root.mkdir(parents=True, exist_ok=True)
        self.broker_url = broker_url
        self.transport_options: dict[str, object] = {}
        if broker_url.startswith("filesystem://"):
            self.transport_options = filesystem_options(root / "broker", polling_interval=0.05)
        base = {k: v for k, v in os.environ.items() if not any(k.startswith(s) for s in _STRIPPED)}
        pythonpath = os.pathsep.join(filter(None, [str(settings.BASE_DIR), base.get("PYTHONPATH")]))
        self.env: dict[str, str] = {
            **base,
            "DJANGO_SETTINGS_MODULE": "runs.settings",
            "PYTHONPATH": pythonpath,
            "DATABASE_URL": database_url(),
            "RUNLEDGER_VAR_DIR": str(root),
            "CELERY_BROKER_URL": broker_url,
            "RUNLEDGER_BROKER_POLL_SECONDS": "0.05",
            "RUNLEDGER_LEASE_SECONDS": str(lease_seconds),
            # A quarter of the lease unless told (the default 5s assumes a 30s lease).
            "RUNLEDGER_EFFECT_MARGIN_SECONDS": str(
                lease_seconds / 4 if effect_margin is None else effect_margin
            ),
            "RUNLEDGER_SWEEP_SECONDS": str(sweep_seconds),
            "RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS": str(lost_after),
            # The workers install the harness app (its fault registry, the examples) on purpose.
            "RUNLEDGER_HARNESS": "1",
            "RUNLEDGER_SILENCED_CHECKS": "runledger.E001,runledger.W001",
            "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
            **(env or {}),
        }
        self.queue = self.env.get("RUNLEDGER_QUEUE", "runledger")
        self.control_queue = self.env.get("RUNLEDGER_CONTROL_QUEUE", f"{self.queue}.control")
        self.recovered_queue = self.env.get("RUNLEDGER_RECOVERED_QUEUE", f"{self.queue}.recovered")
        self.procs: list[subprocess.Popen[bytes]] = []
        self._connection: Any = None

    def _spawn(
        self,
        args: list[str],
        name: str,
        env: Mapping[str, str],
        program: tuple[str, ...] = ("celery", "-A", "runs"),
    ) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", *program, *args],
            cwd=settings.BASE_DIR,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def worker(
        self,
        name: str,
        *,
        queues: str | None = None,
        concurrency: int = 1,
        pool: str = "prefork",
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        args = [
            "worker",
            "-n",
            f"{name}@%h",
            "-Q",
            # Every queue by default, in one process (`runledger worker` would start a control
            # process apart: a test that needs it starts `runledger_worker`).
            queues or f"{self.queue},{self.recovered_queue},{self.control_queue}",
            "-c",
            str(concurrency),
            "-P",
            pool,
        ]
        args += ["-l", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"]
        return self._spawn(args, name, env or {})

    def runledger_worker(
        self,
        name: str,
        *,
        concurrency: int = 1,
        runs_in_flight: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """``runledger worker`` as production starts it: the runs' pool and the control
        process, under one command (kill its process group to lose the whole "host");
        ``runs_in_flight``: the threads mode (``--runs-in-flight N``) instead of ``-c``."""
        size = ["-c", str(concurrency)]
        if runs_in_flight is not None:
            size = ["--runs-in-flight", str(runs_in_flight)]
        args = ["worker", "-n", f"{name}@%h", *size, "-l", "info"]
        args += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
        return self._spawn(args, name, env or {}, program=("runs.cli",))

    def beat(self, name: str = "beat") -> subprocess.Popen[bytes]:
        args = ["beat", "-l", "info", "--pidfile", str(self.root / f"{name}.pid")]
        args += ["-s", str(self.root / f"{name}-schedule")]
        return self._spawn(args, name, {})

    def send(self, task: Task, run_id: str, *, queue: str | None = None) -> None:
        """Enqueue ``task(run_id)`` on this cluster's broker (not the caller's own)."""
        if self._connection is None:
            # Name the transport: this process's own settings may select another one.
            scheme = self.broker_url.split("://", 1)[0]
            transport = FILESYSTEM_TRANSPORT if scheme == "filesystem" else scheme
            self._connection = app.connection_for_write(
                self.broker_url, transport=transport, transport_options=self.transport_options
            )
        options: dict[str, Any] = {"connection": self._connection, "queue": queue or self.queue}
        task.apply_async((run_id,), **options)

    @contextlib.contextmanager
    def producing(self) -> Iterator[None]:
        """Send this process's own enqueues to this cluster's broker while the block runs.

        ``runs.operations.tasks.enqueue_*`` publish through the Celery app's configured broker; a
        test
        whose views run in this process (Django's live server, the test client) uses this so
        that what its views enqueue after a commit reaches the cluster's workers.
        """
        scheme = self.broker_url.split("://", 1)[0]
        wanted = {
            "broker_url": self.broker_url,
            "broker_transport": FILESYSTEM_TRANSPORT if scheme == "filesystem" else None,
            "broker_transport_options": self.transport_options,
        }
        saved = {key: app.conf.get(key) for key in wanted}
        env = os.environ.pop("CELERY_BROKER_URL", None)  # it would win over the app's conf
        app.conf.update(wanted)
        _drop_producer_pools()
        try:
            yield
        finally:
            app.conf.update(saved)
            if env is not None:
                os.environ["CELERY_BROKER_URL"] = env
            _drop_producer_pools()

    def published(self) -> list[tuple[str, list[Any]]]:
        """(task name, args) of the messages waiting in a filesystem broker, oldest first."""
        folder = Path(str(self.transport_options.get("data_folder_out", "")))
        if not folder.is_dir():
            return []
        out = []
        for path in sorted(folder.glob("*.msg")):
            message = json.loads(path.read_text())
            body = json.loads(base64.b64decode(message["body"]))
            out.append((message["headers"]["task"], list(body[0])))
        return out

    def log(self, name: str, tail: int = 40) -> str:
        path = self.root / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-tail:])

    @staticmethod
    def kill(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (a worker's parent and its pool children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc, signal.SIGCONT)
                self.kill(proc, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            # Pool children of a killed parent are in its group: make sure none outlive it.
            self.kill(proc)
        self.procs.clear()
        if self._connection is not None:
            self._connection.release()
            self._connection = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _drop_producer_pools() -> None:
    # The app caches its broker connection pool on first use; the next send builds a new one
    # from the conf as it is now (what Celery itself does after a fork).
    app._pool = None  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, KeyError):
        app.__dict__["amqp"]._producer_pool = None


def wait_for(predicate: Any, *, timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return bool(value)
        time.sleep(interval)
