"""Draining: a worker asked to stop hands its runs back at the next step boundary.

The worker process (``runs.operations.drain``) calls ``request()`` when it is told to stop
(SIGTERM: a deploy, a scale-down). From then on, an execution about to *execute* a step (not
replay one) stops before it and hands the run back: its steps so far are committed, its lease is
released and it is queued again (``ledger.transitions.run_hand_back``), so another worker
continues it at once instead of after the lease expires. A step already executing finishes
first: a deploy's stop timeout must cover the longest step, not the longest run.
"""

from __future__ import annotations

import threading

_requested = threading.Event()


def request() -> None:
    """From now on, hand runs back at their next step boundary (this process only)."""
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def clear() -> None:
    """Forget a request (tests; a process that was told to stop and then was not)."""
    _requested.clear()
