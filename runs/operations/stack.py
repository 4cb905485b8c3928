"""Processes of a stack on one machine (``manage.py serve``, ``manage.py demo``): start each in
a session of its own (so stopping one stops its pool children too), watch them, stop them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings

Children = dict[str, "subprocess.Popen[bytes]"]


def celery(*args: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "runs", *args]


def worker_command(*, name: str, concurrency: int, loglevel: str = "INFO") -> list[str]:
    """``runledger worker``: the runs' pool and the control process (the sweep, deliveries)."""
    options = [f"--loglevel={loglevel}", f"--concurrency={concurrency}", "-n", name]
    return [sys.executable, "-m", "runs.cli", "worker", *options]


def beat_command(*, loglevel: str = "INFO") -> list[str]:
    schedule = settings.CELERY_BEAT_SCHEDULE_FILENAME
    return celery("beat", f"--loglevel={loglevel}", "--schedule", schedule)


def start(commands: Mapping[str, Sequence[str]], env: Mapping[str, str] | None = None) -> Children:
    return {
        name: subprocess.Popen(list(cmd), start_new_session=True, env=dict(env or os.environ))
        for name, cmd in commands.items()
    }


class NotServing(Exception):
    """The stack did not come up: a process exited during start-up, or no good answer came."""


def wait_until_served(url: str, children: Children, seconds: float) -> Any:
    """GET ``url`` until it answers 200 with no warning (the first sweep ran: the worker and
    beat are up); return its JSON body. Raises ``NotServing`` when a child exits first or
    ``seconds`` pass (with the last answer: a probe's failing checks)."""
    deadline = time.monotonic() + seconds
    last: object = "no answer yet"
    while time.monotonic() < deadline:
        for name, child in children.items():
            if child.poll() is not None:
                raise NotServing(f"{name} exited with {child.returncode} during start-up")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = json.load(response)
            if not any("warning" in check for check in body.get("checks", {}).values()):
                return body
            last = body["checks"]
        except urllib.error.HTTPError as exc:
            last = json.loads(exc.read() or b"{}").get("checks", exc.code)
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)  # polling a condition (the server answers), not waiting for a time
    raise NotServing(f"the stack was not ready after {seconds:.0f} s: {last}")


def wait_for_signal(
    children: Children, *, say: Callable[[str], object], essential: Iterable[str] | None = None
) -> None:
    """Return on SIGINT or SIGTERM, or when an ``essential`` child exits (all are, by default).

    A part that is not essential and exits is reported once and left down: the stack's
    ``/readyz`` shows what is missing, and restarting is the machine's supervisor's job.
    """
    must_live = set(children if essential is None else essential)
    reported: set[str] = set()
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop["now"]:
        for name, child in children.items():
            if child.poll() is None or name in reported:
                continue
            reported.add(name)
            if name in must_live:
                say(f"{name} exited with {child.returncode}; stopping")
                stop["now"] = True
            else:
                say(f"{name} exited with {child.returncode}; the rest keeps running (see /readyz)")
        time.sleep(0.5)


def stop(children: Children, *, grace_seconds: float) -> None:
    """SIGTERM every process group; what still runs after ``grace_seconds`` is killed."""
    for child in children.values():
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    for child in children.values():
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
