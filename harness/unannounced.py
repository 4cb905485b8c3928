"""Runs the equipment starts for itself: executed in this process (a benchmark, the demo's
staged crashes) or sent to a cluster's broker by hand (the kill test), so not announced to this
process's own broker (``ledger.signals.held``)."""

from __future__ import annotations

from typing import Any

from ledger import signals, transitions
from ledger.models import Run


def start_unannounced(**kwargs: Any) -> Run:
    """``transitions.run_start(**kwargs)`` with no ``run_queued`` announcement."""
    with signals.held():
        return transitions.run_start(**kwargs)
