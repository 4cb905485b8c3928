"""The fault-point registry: what happens at the product's named points (``ledger.faultpoints``),
for the kill test, the soak, the demo's staged crashes and the tests. Importing this module
installs it as the product's one hook; the harness app imports it at start-up.

``RUNLEDGER_KILL_AT=charge.after_effect`` (or a comma-separated list) makes the process SIGKILL
itself when it reaches that point, the first time in this process; ``charge.after_effect@2``
the second time (fan-out siblings reach the same point). Tests in one process can instead
install a hook with ``set_hook``.

``RUNLEDGER_KILL_SCOPE=group`` kills the whole process group instead (a Celery worker's parent
and its pool children, as when a machine or container is lost); by default only the process at
the point dies (as when the OOM killer takes one pool child). ``RUNLEDGER_KILL_MARK=<path>``
writes the point and the time of death to that file first, so a kill test can measure recovery,
and makes the point fire once per mark file: a pool child that replaces a killed one (and gets
the same task again) does not die at the same point again.

``RUNLEDGER_HOLD_AT=<point>`` with ``RUNLEDGER_HOLD_MARK=<path>`` freezes instead: the first
process to reach the point writes ``<point> <pid>`` to the mark file (once per file) and
SIGSTOPs its whole process group — a worker frozen mid-step, as by a VM pause, until a test
sends SIGCONT. The product's own points: ``engine.before_send`` (after an effect's intent
committed, before
the lease check), ``task.after_execute`` (a run's outcome committed, before the task returns and
the broker acknowledges it), ``notify.after_send`` (a notification received, not yet
recorded), ``alerts.after_rule`` (one alert rule's incidents and pages committed, the next rule
not yet evaluated), ``claude.model.before_forward`` and ``claude.model.after_record`` (a Claude
session's model request about to be forwarded; its answer recorded, not yet handed to the CLI).
``RUNLEDGER_CLOCK_OFFSET_FILE=<path>`` makes the workers execute runs on a clock that many
seconds (the file's text, read at each reading) ahead of the real one: a test moves it forward
an hour to see a sleep come due; ``@<unix seconds>`` stops it at that time.
``RUNLEDGER_KILL_SIGNAL=STOP`` freezes instead of killing (SIGSTOP, to the process or the
group): a zombie that a test wakes later with SIGCONT, and that then goes on from the point as
if nothing had happened — after another worker has taken its run over.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.utils import timezone

from ledger import faultpoints

_hooks: dict[str, Callable[[], None]] = {}
_fired: set[str] = set()
_reached: Counter[str] = Counter()
_lock = threading.Lock()  # fan-out siblings reach points from several threads


def point(name: str) -> None:
    hook = _hooks.get(name)
    if hook is not None:
        hook()
    if os.environ.get("RUNLEDGER_HOLD_AT") == name:
        _hold(name)
    wanted = os.environ.get("RUNLEDGER_KILL_AT", "")
    if not wanted:
        return
    with _lock:
        _reached[name] += 1
        times = _reached[name]
    for spec in wanted.split(","):
        target, _, nth = spec.partition("@")
        if target == name and times == int(nth or 1) and spec not in _fired:
            _fired.add(spec)
            _die(name)


def _die(name: str) -> None:
    mark = os.environ.get("RUNLEDGER_KILL_MARK")
    if mark:
        try:
            fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # another process already died here
        os.write(fd, f"{name} {time.time()!r}\n".encode())
        os.close(fd)
    sig = signal.SIGSTOP if os.environ.get("RUNLEDGER_KILL_SIGNAL") == "STOP" else signal.SIGKILL
    if os.environ.get("RUNLEDGER_KILL_SCOPE") == "group":
        os.killpg(os.getpgrp(), sig)
    else:
        os.kill(os.getpid(), sig)


def _hold(name: str) -> None:
    mark = os.environ.get("RUNLEDGER_HOLD_MARK", "")
    try:
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except (FileExistsError, FileNotFoundError):
        return  # held once already (or no mark file named): go on
    os.write(fd, f"{name} {os.getpid()}\n".encode())
    os.close(fd)
    os.killpg(os.getpgrp(), signal.SIGSTOP)  # returns when someone sends SIGCONT


def set_hook(name: str, hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever a process of this interpreter reaches ``name``."""
    _hooks[name] = hook


def clear_hooks() -> None:
    _hooks.clear()
    _fired.clear()
    _reached.clear()


def _offset_clock() -> datetime:
    """The real time moved forward by the seconds written in RUNLEDGER_CLOCK_OFFSET_FILE (read
    at each call, so that a test moves a running worker's clock by writing the file); a text
    ``@<unix seconds>`` stops the clock there instead, until the test writes another (a rate
    limit's test moves time only in steps it chose)."""
    try:
        text = Path(os.environ["RUNLEDGER_CLOCK_OFFSET_FILE"]).read_text().strip()
    except (KeyError, FileNotFoundError):
        text = ""
    if text.startswith("@"):
        return datetime.fromtimestamp(float(text[1:]), tz=UTC)
    return timezone.now() + timedelta(seconds=float(text or 0))


faultpoints.install(point)
if os.environ.get("RUNLEDGER_CLOCK_OFFSET_FILE"):
    faultpoints.install_clock(_offset_clock)
