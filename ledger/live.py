"""Live model text: a model's answer as it arrives, to whoever reads the run's stream now.

While a model step executes (never on a replay: a recorded step does not call its model), the
model loops (``ledger.loops``), the PydanticAI adapter and the OpenAI Agents SDK adapter's
streamed turns ask the provider for a streamed answer
and hand each piece of text to ``delta``. The step itself is still recorded once, whole, when
the answer is complete — the ledger holds answers, not pieces of them.

Why the pieces are not rows of the run's stream (``ctx.emit``): a model answers in hundreds of
pieces a second, and each would be a fenced insert, stored for as long as the run; a replay or
a reconnecting reader gains nothing from them, since the whole answer is in the step. So they
are ephemeral: on PostgreSQL one ``NOTIFY`` each on ``LIVE_CHANNEL`` (JSON: run, step, text),
sent by one publisher thread per process on a connection of its own (the model call never waits
for it, and holds no connection for it), and heard by the web process's one listener
(``ledger.waiting``), which hands them to the run's open streams. A reader sees them only while
it is connected: they carry no SSE id, so ``Last-Event-ID`` resumes after the last stored event,
never in the middle of an answer. A full queue drops pieces rather than slow the model down.
Elsewhere (SQLite) there is no NOTIFY and no live text; the answer is in the step all the same.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

log = logging.getLogger(__name__)

LIVE_CHANNEL = "runledger_live"
#: A NOTIFY payload is at most 8000 bytes; a longer piece is cut (the whole answer is stored).
MAX_PIECE_BYTES = 7000
#: Pieces waiting for the publisher; beyond it new ones are dropped.
QUEUE_SIZE = 2000
#: The publisher closes its connection after this long with nothing to send.
IDLE_SECONDS = 5.0

#: (run id, step id) of the model step executing in this context, or None.
_target: ContextVar[tuple[str, str] | None] = ContextVar("runledger_live_target", default=None)
T = TypeVar("T")


@contextmanager
def executing(run_id: str, step_id: str) -> Iterator[None]:
    """Bind the model step that executes now: ``delta`` publishes for it until the block ends."""
    token = _target.set((run_id, step_id))
    try:
        yield
    finally:
        _target.reset(token)


def _carried() -> bool:
    """Whether the database can carry the pieces (PostgreSQL's NOTIFY)."""
    from django.db import connections

    return bool(connections["default"].vendor == "postgresql")


def wanted() -> bool:
    """Whether a streamed answer would reach anyone: a model step executes in this context and
    the database can carry the pieces (PostgreSQL)."""
    return _target.get() is not None and _carried()


def carry(fn: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
    """``fn`` bound to the model step executing in the caller's context, for a coroutine that
    runs on another thread's event loop (a sync agent's PydanticAI bridge)."""
    target = _target.get()

    async def bound() -> T:
        if target is None:
            return await fn()
        token = _target.set(target)
        try:
            return await fn()
        finally:
            _target.reset(token)

    return bound


def delta(text: str) -> None:
    """Hand a piece of the executing model step's answer to the run's live readers (a no-op
    when no model step executes here, or on SQLite). Never blocks, never raises."""
    target = _target.get()
    if target is None or not text or not _carried():
        return
    _publisher.put((target[0], target[1], text))


def parse(payload: str) -> tuple[str, str, str] | None:
    """(run id, step id, text) of a ``LIVE_CHANNEL`` payload; None when it is not one."""
    try:
        data = json.loads(payload)
        return str(data["run"]), str(data["step"]), str(data["text"])
    except (ValueError, KeyError, TypeError):
        return None


Piece = tuple[str, str, str]  # run id, step id, text


def _payloads(pieces: list[Piece]) -> list[str]:
    """The NOTIFY payloads of ``pieces``, in order: consecutive pieces of one step joined (a
    publisher that fell behind catches up in fewer, larger notifications), each at most
    ``MAX_PIECE_BYTES`` of text."""
    joined: list[Piece] = []
    for run_id, step_id, text in pieces:
        last = joined[-1] if joined else None
        if last and last[:2] == (run_id, step_id) and len(last[2]) + len(text) < MAX_PIECE_BYTES:
            joined[-1] = (run_id, step_id, last[2] + text)
        else:
            joined.append((run_id, step_id, text))
    return [
        json.dumps(
            {"run": r, "step": s, "text": t.encode()[:MAX_PIECE_BYTES].decode(errors="ignore")}
        )
        for r, s, t in joined
    ]


class _Publisher:
    """One thread per process that sends the pieces as NOTIFYs, in order, on its own
    autocommit connection (opened on the first piece, closed when idle)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Piece] = queue.Queue(maxsize=QUEUE_SIZE)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, piece: Piece) -> None:
        try:
            self._queue.put_nowait(piece)
        except queue.Full:
            return  # live text is best effort: the whole answer is in the step
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="runledger-live-publisher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        import psycopg

        from ledger.waiting import listening_params

        try:
            with psycopg.connect(**listening_params(), autocommit=True) as conn:
                while True:
                    try:
                        pieces = [self._queue.get(timeout=IDLE_SECONDS)]
                    except queue.Empty:
                        with self._lock:
                            if self._queue.empty():
                                self._thread = None
                                return
                        continue
                    while len(pieces) < 200:  # what else is waiting, joined per step
                        try:
                            pieces.append(self._queue.get_nowait())
                        except queue.Empty:
                            break
                    for payload in _payloads(pieces):
                        conn.execute("SELECT pg_notify(%s, %s)", [LIVE_CHANNEL, payload])
        except Exception as exc:  # the database went away: these pieces are lost, not the run
            log.warning("live text publisher: %r; pieces dropped", exc)
            with self._lock:
                self._thread = None


_publisher = _Publisher()


def _forget_after_fork() -> None:
    global _publisher
    _publisher = _Publisher()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def bound_send(run_id: str, step_id: str, send: Callable[..., Any]) -> Callable[..., Any]:
    """``send`` (a model step's sync or async execute) with the step bound while it runs."""
    if inspect.iscoroutinefunction(send):

        async def asend(*args: Any, **kwargs: Any) -> Any:
            with executing(run_id, step_id):
                return await send(*args, **kwargs)

        return asend

    def ssend(*args: Any, **kwargs: Any) -> Any:
        with executing(run_id, step_id):
            return send(*args, **kwargs)

    return ssend
