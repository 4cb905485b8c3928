"""Real processes for the tests that watch what a deployment's processes write: gunicorn with
the project's configuration, a Celery worker and beat, the metrics exporter."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.servers import die_with_parent

ROOT = Path(__file__).resolve().parents[2]


def redis_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], object], *, timeout: float) -> object:
    """Poll a condition (never a fixed sleep): its first true value, or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return None


def deployment_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A production process's environment: DEBUG off, JSON logs, only what a deployment sets
    (plain HTTP on loopback; the HTTPS defaults are tested apart)."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "RUNLEDGER_"))}
    keep.pop("DEBUG", None)
    return {
        **keep,
        "DJANGO_SETTINGS_MODULE": "runs.settings",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "RUNLEDGER_PLAIN_HTTP": "1",
        "RUNLEDGER_VAR_DIR": str(tmp_path),
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
        "RUNLEDGER_SILENCED_CHECKS": "runledger.W001",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/7",
        "RUNLEDGER_QUEUE": f"runledger-observe-{uuid.uuid4().hex[:10]}",
        **extra,
    }


class Process:
    """A child in a session of its own, its stdout and stderr in one file."""

    def __init__(self, name: str, command: list[str], env: Mapping[str, str], tmp: Path) -> None:
        self.log = tmp / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._out = self.log.open("wb")
        self.popen = subprocess.Popen(
            command,
            env=dict(env),
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,  # never outlives the test run
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, text: str, *, timeout: float = 120) -> None:
        found = wait_for(
            lambda: text in self.output() or self.popen.poll() is not None, timeout=timeout
        )
        assert found and self.popen.poll() is None, f"{text!r} not seen:\n{self.output()}"

    def stop(self, *, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        self._out.close()
        return self.popen.returncode


def gunicorn(env: Mapping[str, str], tmp: Path, port: int) -> Process:
    command = [sys.executable, "-m", "gunicorn", "-c", "python:runs.gunicorn_conf"]
    web = Process("gunicorn", [*command, "--bind", f"127.0.0.1:{port}"], env, tmp)
    web.wait_for_output("Booting worker")
    wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz")[0] == 200, timeout=60)
    return web


def worker(env: Mapping[str, str], tmp: Path, *, concurrency: int = 1) -> Process:
    command = [sys.executable, "-m", "celery", "-A", "runs", "worker", "--loglevel=INFO"]
    name = f"observe-{uuid.uuid4().hex[:6]}@%h"
    process = Process("worker", [*command, f"--concurrency={concurrency}", "-n", name], env, tmp)
    process.wait_for_output(" ready.")
    return process


def beat(env: Mapping[str, str], tmp: Path) -> Process:
    command = [sys.executable, "-m", "celery", "-A", "runs", "beat", "--loglevel=INFO"]
    return Process("beat", [*command, "--schedule", str(tmp / "beat-schedule")], env, tmp)


def manage(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=dict(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()
    except OSError:
        return 0, {}, b""


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a process's output as a JSON object (an AssertionError names the first
    line that is not one)."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"line {number} is not JSON: {line!r}\n{text}") from None
        assert isinstance(record, dict), line
        records.append(record)
    return records


def counter_total(text: str, name: str) -> float:
    """The sum of a counter's samples in Prometheus text."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    )
