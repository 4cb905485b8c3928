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
from collections.abc import Iterator
from typing import Any

from celery.signals import worker_process_init, worker_shutting_down

from ledger.engine import drain

log = logging.getLogger(__name__)

_busy = 0  # runs executing in this process
_in_pool = False  # a prefork pool process (not Celery's main process, not a thread)
_previous: Any = None  # the handler ours replaced (billiard's), for an idle process


@contextlib.contextmanager
def executing() -> Iterator[None]:
    """Around one run's execution. In a pool process, SIGTERM now means "drain" while a run
    executes (installed here, at the first task: billiard resets the signals after
    ``worker_process_init``)."""
    global _busy
    if _in_pool and _previous is None:
        _install()
    _busy += 1
    try:
        yield
    finally:
        _busy -= 1


def _install() -> None:
    global _previous
    _previous = signal.signal(signal.SIGTERM, _on_term)


def _on_term(signum: int, frame: Any) -> None:
    if not _busy:  # idle: exit as the pool process would have
        signal.signal(signal.SIGTERM, _previous)
        if callable(_previous):
            _previous(signum, frame)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if not drain.requested():
        log.warning(
            "worker process %s stopping: its run is handed back at its next step", os.getpid()
        )
    drain.request()


@worker_process_init.connect
def _pool_process(**kwargs: Any) -> None:
    global _in_pool, _previous
    _in_pool, _previous = True, None
    drain.clear()  # forked from a parent that may have been asked already


@worker_shutting_down.connect
def _shutting_down(sig: str = "", how: str = "", **kwargs: Any) -> None:
    """The main process: drain here (the solo and threads pools run tasks in it) and tell the
    pool processes."""
    drain.request()
    import billiard.process

    for child in billiard.process.active_children():
        if child.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)
