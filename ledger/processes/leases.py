"""One lease renewer per worker process: every lease the process holds is renewed by one
statement (``ledger.transitions.leases_renew``) on one thread, whatever the number of runs.

A run's execution ``hold()``s its lease for as long as it executes and ``let_go()``s it at the
end. Each beat (a third of the shortest lease held) renews them all at once; for each run:

- **renewed**: its effect deadline moves (``LeaseFence.confirmed`` with the time read *before*
  the statement was sent, so the deadline errs early, as it always did);
- **refused** (no longer ours: taken over, re-queued, cancelled): the fence is revoked and the
  execution's ``lost`` event set — that run, and only that run, stops at its next write or
  effect, as when its own heartbeat was refused;
- **held by another session this moment** (``SKIP LOCKED``), or the **database failed**: no
  answer — the deadline does not move; the next beat tries again. If none succeeds in time the
  fence stops the effects first and the sweep recovers the run once its lease expires.

A cancel is seen within a moment, not at the next beat: each held run is watched on the
process's LISTEN connection (``ledger.waiting.watch``: the trigger that NOTIFYs when a run's
status settles), and a notification for a held run brings the next beat forward to now. A run
whose renewal is refused and whose status is ``cancelled`` has its fence revoked as cancelled:
the model call or wait its agent is in ends at once with ``RunCancelled``
(``ledger.engine.live``). Without PostgreSQL (the demo's SQLite) a cancel is seen at the next
beat.

After a renewal the pauses are read again (one query for all the runs), so a pause made while
an agent executes stops it at its next step the pause covers. The renewer's connection is given
back to the process's pool after each beat (``ledger.engine.pooling``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, connection

from ledger import selectors, transitions, waiting
from ledger.engine import pooling
from ledger.engine.fence import LeaseFence
from ledger.engine.holds import Holds
from ledger.models import Run, RunStatus

log = logging.getLogger(__name__)

#: After a beat that found a run's row held by another session (SKIP LOCKED: most often the
#: run's own step write, a few milliseconds), the next beat comes this soon, not a third of the
#: lease later: a busy run must not go unrenewed for three beats in a row and lose its lease.
BUSY_RETRY_SECONDS = 0.25


@dataclass(eq=False)
class Held:
    """One execution's lease, as the renewer keeps it."""

    run_id: str
    token: str
    seconds: float
    fence: LeaseFence
    agent: str = ""
    holds: Holds | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    unwatch: Callable[[], None] = lambda: None


class LeaseRenewer:
    """Renews the leases of one process (``renewer()``: the process's one instance)."""

    def __init__(self) -> None:
        self._held: dict[int, Held] = {}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._poked = False  # a held run's status changed: beat now
        self._busy = False  # the last beat found a run's row held by another session
        self.beats = 0  # statements sent (tests, metrics)

    def hold(
        self,
        *,
        run_id: str,
        token: str,
        seconds: float,
        fence: LeaseFence,
        agent: str = "",
        holds: Holds | None = None,
    ) -> Held:
        held = Held(run_id, token, seconds, fence, agent, holds)
        fence.watched = True
        held.unwatch = waiting.watch(run_id, self.poke)
        with self._lock:
            self._held[id(held)] = held
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="lease-renewer", daemon=True
                )
                self._thread.start()
            self._lock.notify()  # a shorter lease than the others may bring the next beat closer
        return held

    def let_go(self, held: Held) -> None:
        with self._lock:
            self._held.pop(id(held), None)
        held.unwatch()

    def poke(self) -> None:
        """A held run's status changed (a cancel, say): the next beat is now."""
        with self._lock:
            self._poked = True
            self._lock.notify()

    def held(self) -> list[Held]:
        with self._lock:
            return list(self._held.values())

    def _work(self) -> None:
        try:
            while True:
                batch = self._due()
                try:
                    self.beat(batch)
                except Exception:  # a bug must not end every run's renewals: the next beat
                    log.exception("lease renewal of %d runs failed", len(batch))
        finally:
            connection.close()

    def _due(self) -> list[Held]:
        """Wait until a beat is due — a third of the shortest lease held since the last beat,
        or since the first lease came — and return the leases to renew. A lease held meanwhile
        only shortens the wait if its own third is shorter (its claim was just confirmed)."""
        with self._lock:
            since = time.monotonic()
            while True:
                if not self._held:
                    self._poked = False
                    self._lock.wait()
                    since = time.monotonic()
                    continue
                if self._poked:
                    self._poked = False
                    return list(self._held.values())
                every = min(h.seconds for h in self._held.values()) / 3
                if self._busy:  # a row was held this moment (its own step's write): soon again
                    every = min(every, BUSY_RETRY_SECONDS)
                left = since + every - time.monotonic()
                if left <= 0:
                    return list(self._held.values())
                self._lock.wait(left)

    def beat(self, batch: list[Held]) -> None:
        """One renewal of ``batch`` (the renewer's thread; a test may call it directly)."""
        sent_at = time.monotonic()  # before the statement: the deadline errs early
        try:
            answers = transitions.leases_renew(
                leases=[transitions.HeldLease(h.run_id, h.token, h.seconds) for h in batch]
            )
        except DatabaseError as exc:
            log.warning("lease renewal of %d runs: the database failed (%s)", len(batch), exc)
            connection.close()  # broken or unknown: the next beat opens another
            return
        finally:
            self.beats += 1
        renewed = []
        self._busy = any(answers.get(h.run_id) is None for h in batch)
        refused = [h for h in batch if answers.get(h.run_id) is False]
        cancelled = self._cancelled([h.run_id for h in refused])
        for held in batch:
            answer = answers.get(held.run_id)
            if answer is True:
                held.fence.confirmed(sent_at=sent_at)
                renewed.append(held)
            elif answer is False:
                log.warning("run %s: lease renewal refused; its execution stops", held.run_id)
                held.fence.revoked(cancelled=held.run_id in cancelled)
                held.lost.set()
                self.let_go(held)
        self._refresh_holds(renewed)
        pooling.release()

    @staticmethod
    def _cancelled(run_ids: list[str]) -> set[str]:
        """Which of the runs whose renewal was refused were cancelled (one query, only when a
        renewal was refused)."""
        if not run_ids:
            return set()
        try:
            rows = Run.objects.filter(pk__in=run_ids, status=RunStatus.CANCELLED)
            return set(rows.values_list("pk", flat=True))
        except DatabaseError as exc:
            log.warning("lease renewal: could not read the refused runs' status (%s)", exc)
            connection.close()
            return set()

    @staticmethod
    def _refresh_holds(batch: list[Held]) -> None:
        """The pauses of every renewed run, in one query."""
        wanted = [h for h in batch if h.holds is not None]
        if not wanted:
            return
        try:
            pauses = selectors.active_pauses_of(runs=[(h.run_id, h.agent) for h in wanted])
        except DatabaseError as exc:
            log.warning("lease renewal: could not read the pauses (%s)", exc)
            connection.close()
            return
        for held in wanted:
            assert held.holds is not None
            held.holds.current = pauses[held.run_id]


_renewer: LeaseRenewer | None = None
_renewer_lock = threading.Lock()


def renewer() -> LeaseRenewer:
    """This process's renewer (a forked child gets a fresh one: the thread is not inherited)."""
    global _renewer
    with _renewer_lock:
        if _renewer is None:
            _renewer = LeaseRenewer()
        return _renewer


def _forget_after_fork() -> None:
    global _renewer, _renewer_lock
    _renewer, _renewer_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
