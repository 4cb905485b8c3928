"""What the ledger reports to whoever watches it (metrics, logs), without knowing who watches.

The ledger calls ``emit(event, **fields)`` at a handful of points; the project around it
subscribes observers (``runs.operations.metrics`` counts them for Prometheus). ``ledger`` never
imports an
observer. An emit with no observers costs one call and an empty loop; observers run inline on
the engine's hot path, so they must be cheap (a counter increment, no I/O) and must not raise:
one that does is logged and skipped, never propagated into a step.

Events and their fields:

- ``step_written``: ``kind``, ``status``, ``seconds`` (the fenced write's duration), and
  ``count`` when one commit wrote that many rows of that kind (batched durability; else 1).
- ``run_resumed``: ``run_id`` (an execution after the first: a resume or a recovery).
- ``reconciled``: ``answer`` (``happened``, ``not_happened``, ``unknown``, ``no_read_path``).
- ``lease_expired``: ``run_id`` (the sweep re-queued a run whose worker stopped renewing).
- ``sweep``: ``requeued`` (one pass of the recovery sweep).
- ``notification``: ``channel``, ``outcome`` (``sent``, ``failed``: one delivery attempt).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

Observer = Callable[[str, Mapping[str, Any]], None]

_observers: tuple[Observer, ...] = ()


def subscribe(observer: Observer) -> None:
    """Add an observer once (subscribing it again changes nothing)."""
    global _observers
    if observer not in _observers:
        _observers = (*_observers, observer)


def unsubscribe(observer: Observer) -> None:
    global _observers
    _observers = tuple(o for o in _observers if o is not observer)


def watched() -> bool:
    """Whether anyone observes: a hot path may skip timing and building an event nobody reads."""
    return bool(_observers)


def emit(event: str, /, **fields: Any) -> None:
    for observer in _observers:
        try:
            observer(event, fields)
        except Exception:
            log.exception("observer %r failed on %s; skipped", observer, event)
