"""The HTTP API's stack on loopback for the tests and the bench: gunicorn (the production
configuration, ``runs/gunicorn_conf.py``), Celery workers and beat (``harness.cluster``), on the
current database and a Redis broker, all with one private queue.

    with ApiStack(tmp_path, broker_url="redis://127.0.0.1:6379/4") as stack:
        stack.worker("w1")
        client = ledger.client.Client(stack.url, token)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from harness.cluster import Cluster
from harness.servers import die_with_parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiStack:
    """gunicorn + Celery (workers started by ``worker``) + beat, sharing ``Cluster``'s env."""

    def __init__(
        self,
        root: Path,
        *,
        broker_url: str,
        web_processes: int = 2,
        threads: int = 8,
        lease_seconds: float = 2.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        queue = f"runledger-api-{uuid.uuid4().hex[:10]}"
        self.cluster = Cluster(
            root,
            broker_url=broker_url,
            lease_seconds=lease_seconds,
            env={
                "RUNLEDGER_QUEUE": queue,
                "SECRET_KEY": "api-stack-" + uuid.uuid4().hex,
                "ALLOWED_HOSTS": "127.0.0.1",
                "RUNLEDGER_PLAIN_HTTP": "1",
                "RUNLEDGER_API_RATE": "100000/m",
                **(env or {}),
            },
        )
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.web_processes, self.threads = web_processes, threads
        self.web: subprocess.Popen[bytes] | None = None

    def start(self) -> ApiStack:
        env = {
            **self.cluster.env,
            "WEB_CONCURRENCY": str(self.web_processes),
            "RUNLEDGER_WEB_THREADS": str(self.threads),
            "RUNLEDGER_ACCESS_LOG": "",
        }
        log = open(self.root / "web.log", "ab")  # noqa: SIM115 - the child owns it
        self.web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:runs.gunicorn_conf",
                "--bind",
                f"127.0.0.1:{self.port}",
            ],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        log.close()
        self.cluster.beat()
        deadline = time.monotonic() + 120
        while not self._answers():
            if self.web.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start:\n" + self.log("web"))
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/api/v1/openapi.json", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def worker(self, name: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        return self.cluster.worker(name, **kwargs)

    def log(self, name: str, tail: int = 60) -> str:
        path = self.root / f"{name}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(lines[-tail:])

    def stop(self) -> None:
        if self.web is not None and self.web.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.web.pid, signal.SIGTERM)
            try:
                self.web.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.web.pid, signal.SIGKILL)
                self.web.wait()
        self.cluster.stop()

    def __enter__(self) -> ApiStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
