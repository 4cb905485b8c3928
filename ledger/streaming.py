"""Following a run's stream: the events its agent emits (``ctx.emit``), as they are appended,
until the run settles. The HTTP API's ``GET /api/v1/runs/{run_id}/stream`` (Server-Sent Events)
and the run page's live stream read through ``follow``.

``follow`` reads the table with a bounded interval (``POLL_SECONDS``), holding no database
connection between reads (it gives its connection back after each), and ends when the run
settles (``ledger.waiting.SETTLED``: finished, or stopped for a person) once every event
appended before that is delivered — the run's status is read *before* the events, so an event
committed before the run settled is always in the last read — or after ``max_seconds`` (the
client reconnects with the id of the last event it saw and loses nothing).

Between its reads a follower also hands on the run's live model text (``ledger.live``: pieces
of an answer as it arrives, PostgreSQL only) as ``Live`` items: ephemeral, with no id, heard
only by a follower connected at the time — the step records the whole answer.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from ledger import selectors, waiting
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
class Live:
    """A piece of a model step's answer as it arrives (``ledger.live``): not stored, no id."""

    step_id: str
    text: str


#: Live pieces a follower holds for its reader at most; beyond it they are dropped.
LIVE_BUFFER = 1000


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
    live: bool = False,
) -> Iterator[Emitted | Settled | Idle | Live]:
    """The run's events after ``after``, as they are appended; a ``Settled`` last when the run
    settles; ``Idle`` after each read that found nothing; it stops (without ``Settled``) after
    ``max_seconds``. ``live``: between reads, the run's live model text as ``Live`` items
    (PostgreSQL; elsewhere none come)."""
    pieces: queue.Queue[Live] = queue.Queue(maxsize=LIVE_BUFFER)
    stop_hearing: Callable[[], None] = lambda: None  # noqa: E731
    if live:

        def heard(step_id: str, text: str) -> None:
            # A reader that does not keep up loses live text, never a stored event.
            with contextlib.suppress(queue.Full):
                pieces.put_nowait(Live(step_id, text))

        stop_hearing = waiting.hear(run_id, heard)
    try:
        yield from _follow(run_id, after, max_seconds, poll, sleep if not live else None, pieces)
    finally:
        stop_hearing()


def _follow(
    run_id: str,
    after: int,
    max_seconds: float,
    poll: float,
    sleep: Callable[[float], None] | None,
    pieces: queue.Queue[Live],
) -> Iterator[Emitted | Settled | Idle | Live]:
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
        if sleep is not None:
            sleep(poll)
        else:
            yield from _pieces_for(pieces, poll)


def _pieces_for(pieces: queue.Queue[Live], seconds: float) -> Iterator[Live]:
    """The live pieces that come within ``seconds``, each as soon as it comes."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        try:
            yield pieces.get(timeout=left)
        except queue.Empty:
            return
