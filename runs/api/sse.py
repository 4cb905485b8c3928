"""Server-Sent Events of a run's stream (``ledger.streaming.follow``), for the HTTP API and the
run page.

A stream holds one thread of a web worker for as long as it is open (gunicorn runs ``gthread``
workers: ``RUNLEDGER_WEB_THREADS`` threads each, 8 by default), and no database connection
between its reads. So that streams can never take every thread of a worker — the dashboard and
the API must still answer — a web process serves at most ``MAX_STREAMS`` streams at once (a
further one is refused with 503 and ``Retry-After``), and a stream closes after
``MAX_STREAM_SECONDS``: an SSE client reconnects on its own with ``Last-Event-ID`` and misses
nothing. More concurrent readers: more web processes (``WEB_CONCURRENCY``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from django.http import StreamingHttpResponse

from ledger.streaming import POLL_SECONDS, Emitted, Idle, Live, Settled, follow

#: Streams one web process serves at once (half its threads by default).
MAX_STREAMS = 4
#: How long one stream stays open before the client reconnects (with ``Last-Event-ID``).
MAX_STREAM_SECONDS = 300.0
#: Sent with every stream: how long an EventSource waits before it reconnects (ms).
RETRY_MS = 1000
#: A comment line at least this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0

_open = threading.BoundedSemaphore(MAX_STREAMS)


class TooManyStreams(Exception):
    """This process serves ``MAX_STREAMS`` streams already."""


def event_lines(item: Emitted | Settled | Live) -> str:
    """One SSE event: an emitted event (``id`` is its stream id, ``data`` a JSON object with
    ``kind``, ``data``, ``step_id``, ``at``), ``event: end`` with the settled status, or
    ``event: delta`` with a piece of live model text (``step_id``, ``text``) — no ``id``, so
    that a reconnect (``Last-Event-ID``) resumes after the last stored event: live text is
    never replayed."""
    if isinstance(item, Settled):
        return f"event: end\ndata: {json.dumps({'status': item.status})}\n\n"
    if isinstance(item, Live):
        piece = json.dumps({"step_id": item.step_id, "text": item.text}, separators=(",", ":"))
        return f"event: delta\ndata: {piece}\n\n"
    body = {"id": item.id, "kind": item.kind, "data": item.data, "step_id": item.step_id}
    body["at"] = item.at.isoformat()
    return f"id: {item.id}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"


def response(run_id: str, *, after: int, live: bool = False) -> StreamingHttpResponse:
    """The run's stream after event ``after`` as ``text/event-stream`` (``live``: with the
    live model text, ``event: delta``); ``TooManyStreams`` when this process serves its limit
    already."""
    if not _open.acquire(blocking=False):
        raise TooManyStreams
    lines = _Held(_lines(run_id, after, live))
    answer = StreamingHttpResponse(lines, content_type="text/event-stream")
    answer["Cache-Control"] = "no-cache"
    answer["X-Accel-Buffering"] = "no"  # nginx: pass each event on as it comes
    return answer


class _Held:
    """The stream's lines, holding one of the process's stream places until they end or the
    response is closed (the client went away; Django closes it), even if never started."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines
        self._held = True

    def __iter__(self) -> _Held:
        return self

    def __next__(self) -> str:
        try:
            return next(self._lines)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._held:
            self._held = False
            _open.release()
            if hasattr(self._lines, "close"):
                self._lines.close()


def _lines(run_id: str, after: int, live: bool) -> Iterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    quiet = 0.0
    for item in follow(run_id, after=after, max_seconds=MAX_STREAM_SECONDS, live=live):
        if isinstance(item, Idle):
            quiet += POLL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"
            continue
        quiet = 0.0
        yield event_lines(item)
