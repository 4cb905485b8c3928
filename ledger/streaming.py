"""Following a run's stream: the events its agent emits (``ctx.emit``), as they are appended,
until the run settles. The HTTP API's ``GET /api/v1/runs/{run_id}/stream`` (Server-Sent Events)
and the run page's live stream read through ``follow``.

``follow`` reads the table with a bounded interval (``POLL_SECONDS``), holding no database
connection between reads (it gives its connection back after each), and ends when the run
settles (``ledger.waiting.SETTLED``: finished, or stopped for a person) once every event
appended before that is delivered — the run's status is read *before* the events, so an event
committed before the run settled is always in the last read — or after ``max_seconds`` (the
client reconnects with the id of the last event it saw and loses nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from ledger import selectors
from ledger.waiting import SETTLED

#: How often a follower reads the table for new events.
POLL_SECONDS = 0.5
#: Events read at once.
PAGE = 200


@dataclass(frozen=True)
class Emitted:
    """One event of the stream: ``id`` is what a client resumes after (``Last-Event-ID``)."""

    id: int
    kind: str
    data: Any
    step_id: str
    at: datetime


@dataclass(frozen=True)
class Settled:
    """The run settled (``status``): nothing more will be appended unless it is resumed."""

    status: str


@dataclass(frozen=True)
class Idle:
    """Nothing new since the last read (a follower may send a keep-alive)."""


def follow(
    run_id: str,
    *,
    after: int = 0,
    max_seconds: float = 300.0,
    poll: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Emitted | Settled | Idle]:
    """The run's events after ``after``, as they are appended; a ``Settled`` last when the run
    settles; ``Idle`` after each read that found nothing; it stops (without ``Settled``) after
    ``max_seconds``."""
    deadline = time.monotonic() + max_seconds
    while True:
        status = selectors.run_status(run_id=run_id)
        rows = selectors.stream_after(run_id=run_id, after=after, limit=PAGE)
        if not connection.in_atomic_block:
            connection.close()  # between reads the follower holds no connection
        for row in rows:
            after = row.id
            yield Emitted(row.id, row.kind, row.data, row.step_id, row.created_at)
        if len(rows) == PAGE:
            continue
        if status is None or status in SETTLED:
            yield Settled(status or "unknown")
            return
        if time.monotonic() >= deadline:
            return
        if not rows:
            yield Idle()
        sleep(poll)
