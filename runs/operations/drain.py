"""The worker's drain on SIGTERM: stop taking runs, hand back the running ones at their next
step boundary (``ledger.engine.drain``), exit when they are handed back or finished.

Celery's warm shutdown (SIGTERM to the worker's main process) stops consuming and waits for the
tasks in flight. This module makes those tasks end soon: the main process tells its pool
processes (SIGTERM, which a pool process running a run takes as "drain", and an idle one as
"exit"), and a run about to execute its next step is handed back — lease released, queued
again — so that another worker continues it at once. systemd's default ``KillMode`` sends
SIGTERM to every process of the unit; the pool processes take that the same way.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Any

from celery.signals import worker_process_init, worker_shutting_down

from ledger.engine import drain

log = logging.getLogger(__name__)

_busy = 0  # runs executing in this process


@contextlib.contextmanager
def executing() -> Any:
    """Around one run's execution in a worker process (an idle process exits on SIGTERM)."""
    global _busy
    _busy += 1
    try:
        yield
    finally:
        _busy -= 1


def _on_term(signum: int, frame: Any) -> None:
    if not _busy:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if not drain.requested():
        log.warning(
            "worker process %s stopping: its run is handed back at its next step", os.getpid()
        )
    drain.request()


@worker_process_init.connect
def _pool_process(**kwargs: Any) -> None:
    drain.clear()  # forked from a parent that may have been asked already
    signal.signal(signal.SIGTERM, _on_term)


@worker_shutting_down.connect
def _shutting_down(sig: str = "", how: str = "", **kwargs: Any) -> None:
    """The main process: drain here (the solo and threads pools run tasks in it) and tell the
    pool processes."""
    drain.request()
    import billiard.process

    for child in billiard.process.active_children():
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(child.pid, signal.SIGTERM)
