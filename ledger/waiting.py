"""Waiting for a run to settle (finish, or stop for a person) without polling the table.

On PostgreSQL a trigger on ``ledger_run`` (migration ``0010``) NOTIFYs ``runledger_run_settled``
with the run id when a run's status becomes succeeded, failed, cancelled or needs_attention, and
PostgreSQL delivers the notification when that transaction commits — whoever wrote it (a worker,
the dashboard, the admin, a settlement). One listener thread per process holds one connection
with ``LISTEN`` and wakes the threads waiting on that run; a waiter reads the run once when it
starts, once per notification for its run, and once every ``RECHECK_SECONDS`` as a safety net
(a listener reconnecting after the database restarted may miss a notification). Why not a
Django signal or the Celery result: the run settles in a worker process, not in the process
that waits, and the ledger row is the truth.

Elsewhere (SQLite, the demo's default) there is no NOTIFY: the waiter reads the run with a
backing-off interval (0.05 s growing to 1 s).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Protocol

from django.db import connections

from ledger import live
from ledger.models import FINAL_STATUSES, RunStatus

log = logging.getLogger(__name__)

CHANNEL = "runledger_run_settled"
#: The states a waiter answers at: the run finished, or it stopped until a person acts.
SETTLED = frozenset({*FINAL_STATUSES, RunStatus.NEEDS_ATTENTION})
RECHECK_SECONDS = 5.0
#: psycopg connection parameters of Django's that a plain listening connection does not take.
_NOT_FOR_LISTENING = (
    "context",
    "cursor_factory",
    "prepare_threshold",
    "isolation_level",
    "assume_role",
    "server_side_binding",
    "pool",
)


class _Woken(Protocol):
    def set(self) -> None: ...


class _Call:
    """A watcher the listener wakes by calling ``fn`` (from its thread): it must be quick."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn

    def set(self) -> None:
        try:
            self._fn()
        except Exception:  # a watcher's bug must not end the listener
            log.exception("run wait listener: a watcher failed")


class _Listener:
    """One LISTEN connection per process, started by the first waiter, kept for the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, set[_Woken]] = defaultdict(set)
        #: Per run, who hears its live model text (``ledger.live``): fn(step id, text).
        self._live: dict[str, set[Callable[[str, str], None]]] = defaultdict(set)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def register(self, run_id: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events[run_id].add(event)
            if self._thread is None:
                self._ready.clear()
                self._thread = threading.Thread(
                    target=self._listen, name="runledger-wait-listener", daemon=True
                )
                self._thread.start()
        # Listening before the waiter's first read: a commit after that read is heard.
        self._ready.wait(timeout=RECHECK_SECONDS)
        return event

    def hear(self, run_id: str, fn: Callable[[str, str], None]) -> None:
        """Call ``fn(step_id, text)`` from the listener's thread for each piece of the run's
        live model text (``ledger.live``) until ``unhear``; waits (a moment) until listening."""
        with self._lock:
            self._live[run_id].add(fn)
            self._start()
        self._ready.wait(timeout=RECHECK_SECONDS)

    def unhear(self, run_id: str, fn: Callable[[str, str], None]) -> None:
        with self._lock:
            hearing = self._live.get(run_id)
            if hearing is not None:
                hearing.discard(fn)
                if not hearing:
                    del self._live[run_id]

    def _start(self) -> None:
        if self._thread is None:
            self._ready.clear()
            self._thread = threading.Thread(
                target=self._listen, name="runledger-wait-listener", daemon=True
            )
            self._thread.start()

    def _heard(self, payload: str) -> None:
        piece = live.parse(payload)
        if piece is None:
            return
        run_id, step_id, text = piece
        with self._lock:
            hearing = list(self._live.get(run_id, ()))
        for fn in hearing:
            try:
                fn(step_id, text)
            except Exception:  # a reader's bug must not end the listener
                log.exception("run wait listener: a live reader failed")

    def watch(self, run_id: str, fn: Callable[[], None]) -> _Woken:
        """Call ``fn`` on each notification for ``run_id`` (and after a reconnect, when one may
        have been missed), from the listener's thread, until ``unregister``; does not wait for
        the listener to be ready."""
        watcher = _Call(fn)
        with self._lock:
            self._events[run_id].add(watcher)
            if self._thread is None:
                self._ready.clear()
                self._thread = threading.Thread(
                    target=self._listen, name="runledger-wait-listener", daemon=True
                )
                self._thread.start()
        return watcher

    def unregister(self, run_id: str, event: _Woken) -> None:
        with self._lock:
            waiting = self._events.get(run_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[run_id]

    def _wake(self, run_id: str) -> None:
        with self._lock:
            for event in self._events.get(run_id, ()):
                event.set()

    def _wake_all(self) -> None:
        with self._lock:
            for events in self._events.values():
                for event in events:
                    event.set()

    def _listen(self) -> None:
        """Listen while anyone waits; the thread ends (closing its connection) once no one has
        waited for a second, or when ``stop_listening`` is called."""
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(**listening_params(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    conn.execute(f"LISTEN {live.LIVE_CHANNEL}")
                    self._ready.set()
                    self._wake_all()  # anything missed while reconnecting is read again
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if note.channel == live.LIVE_CHANNEL:
                                self._heard(note.payload)
                            else:
                                self._wake(note.payload)
                        if self._idle_ends():
                            return
            except Exception as exc:
                log.warning("run wait listener: %r; reconnecting", exc)
                self._ready.clear()
                self._wake_all()
                if self._stop.wait(1.0) or self._idle_ends():
                    return

    def _idle_ends(self) -> bool:
        with self._lock:
            if self._events or self._live:
                return False
            self._thread = None
            return True

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout)
            self._stop.clear()


_listener = _Listener()


def listening_params() -> dict[str, Any]:
    """Connection parameters for a plain psycopg connection to Django's default database."""
    params: dict[str, Any] = connections["default"].get_connection_params()
    for key in _NOT_FOR_LISTENING:
        params.pop(key, None)
    return params


def hear(run_id: str, fn: Callable[[str, str], None]) -> Callable[[], None]:
    """Call ``fn(step_id, text)`` (quickly, from the listener's thread) for each piece of the
    run's live model text (``ledger.live``; PostgreSQL only). Returns the function that stops."""
    if connections["default"].vendor != "postgresql":
        return lambda: None
    _listener.hear(run_id, fn)
    return lambda: _listener.unhear(run_id, fn)


def _forget_after_fork() -> None:
    """A forked child (a worker's pool process) starts its own listener: the parent's thread
    and connection are not its own."""
    global _listener
    _listener = _Listener()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def watch(run_id: str, fn: Callable[[], None]) -> Callable[[], None]:
    """Call ``fn`` (quickly, from the listener's thread) when the run's status settles — a
    cancel among others (PostgreSQL only; elsewhere nothing calls it). Returns the function
    that stops watching. The lease renewer uses it to see a cancel within a moment."""
    if connections["default"].vendor != "postgresql":
        return lambda: None
    watcher = _listener.watch(run_id, fn)
    return lambda: _listener.unregister(run_id, watcher)


def stop_listening() -> None:
    """End this process's listener thread and its connection (a test before dropping its
    database; a process needs not call it)."""
    _listener.stop()


def wait_until_settled(
    run_id: str, *, timeout: float, read: Callable[[], Any], settled: Callable[[Any], bool]
) -> Any:
    """Call ``read`` (which reads the run) until ``settled(value)`` or ``timeout`` seconds pass;
    the last value read. Between reads it sleeps until the run's notification arrives (on
    PostgreSQL) or a backing-off interval passes (elsewhere)."""
    deadline = time.monotonic() + max(0.0, timeout)
    if connections["default"].vendor != "postgresql":
        return _poll(deadline, read, settled)
    event = _listener.register(run_id)
    try:
        while True:
            event.clear()
            value = read()
            left = deadline - time.monotonic()
            if settled(value) or left <= 0:
                return value
            event.wait(timeout=min(left, RECHECK_SECONDS))
    finally:
        _listener.unregister(run_id, event)


def _poll(deadline: float, read: Callable[[], Any], settled: Callable[[Any], bool]) -> Any:
    pause = 0.05
    while True:
        value = read()
        left = deadline - time.monotonic()
        if settled(value) or left <= 0:
            return value
        time.sleep(min(left, pause))
        pause = min(pause * 2, 1.0)
