"""Fencing for effects, not only for writes: when may an effect leave this process?

The lease token fences the ledger: a worker whose lease was taken has every write refused. But
a tool call is not a ledger write — a worker frozen (SIGSTOP, a VM pause, a long GC) after an
effect's intent committed would, on waking, send the effect although another worker has taken
the run over and sent it, or an operator has settled it. Three guards close that:

1. **The holder's own deadline.** A worker knows its lease is valid only from a confirmed claim
   or renewal. For each execution it keeps a deadline on ``time.monotonic()``:
   ``t_sent + lease_seconds - margin``, where ``t_sent`` is read *before* the claim or renewal
   statement is sent (so the deadline errs early) and ``margin`` is
   ``RUNLEDGER_EFFECT_MARGIN_SECONDS``. The heartbeat moves it on each confirmed renewal; a
   refused renewal ends it. Immediately before an effect's tool call — after its ``started``
   intent committed, and before a re-send after a lookup answered ``NOT_HAPPENED`` — the worker
   compares: past the deadline it raises ``LeaseExpired`` (a ``LeaseLost``) and sends nothing,
   writes nothing, and leaves the run to the sweep or a takeover. A local comparison: no
   database round trip per step.

2. **The takeover waits out the previous holder.** The database's ``lease_expires_at`` is the
   previous holder's wall-clock time of its last confirmed claim or renewal plus the lease, and
   the deadline of (1) was at least ``margin`` before it (its ``t_sent`` precedes the statement).
   A claim already requires that expiry to have passed on the claimant's clock. Whatever takes
   the lease from a holder that may still be alive — a claim over an expired lease, the sweep's
   re-queue, an operator's cancel — keeps that expiry in ``Run.prior_lease_expires_at``. A new
   holder that meets an effect a *previous* execution attempted (a ``started`` row to reconcile,
   a failed or settled-not-happened row to send again) first waits until
   ``prior_lease_expires_at + margin`` by its own clock (converted once, at the claim, to its
   monotonic clock) before asking the lookup or sending. So between the old holder's last
   possible check and the new holder's first lookup there are at least ``2 * margin`` seconds,
   less the difference between the two machines' wall clocks. What that guarantees: an old
   holder frozen *before* its check never sends afterwards; one that passed its check sends
   within ``2 * margin`` (minus clock skew) or is in the window that only (3) closes.

3. **A fencing token for the provider.** ``Run.executions``, which every claim increments, is
   the execution's fencing token: it grows with every takeover. Effect tools that declare a
   ``fencing_token`` parameter receive it beside ``idempotency_key``, and reconcile functions
   that declare one receive it with the lookup, so a provider that records the highest token
   seen per key can refuse a stale holder's request whenever it arrives (the example payment
   provider, ``ledger.examples.simulators``, does).

What holds for each kind of provider is in the README's recovery section, as tested by
``tests/ledger/engine/test_effect_fencing.py`` with real worker processes frozen by SIGSTOP.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime

from ledger import faultpoints
from ledger.errors import LeaseLost

log = logging.getLogger(__name__)


class LeaseExpired(LeaseLost):
    """This worker cannot prove its lease is still valid with the margin: it sends nothing."""


class LeaseFence:
    """One execution's view of its lease on the monotonic clock (thread-safe: the heartbeat
    moves the deadline while fan-out threads read it; a float assignment is atomic)."""

    def __init__(
        self, *, run_id: str, token: int, lease_seconds: float, margin: float, sent_at: float
    ) -> None:
        self.run_id = run_id
        self.token = token  # the fencing token handed to tools: grows with every takeover
        self.lease_seconds = lease_seconds
        self.margin = margin
        self.deadline = sent_at + lease_seconds - margin
        self.quiet_at = -math.inf  # monotonic time after which no previous holder can send
        #: Set when the lease is gone (refused at a renewal): a model call or a wait in progress
        #: ends at once (``ledger.engine.live``); ``cancelled`` says whether a cancel took it.
        self.stopped = threading.Event()
        self.cancelled = False
        #: A lease renewer watches this lease (it can be revoked while a step waits).
        self.watched = False
        self._watchers: list[Callable[[], None]] = []
        self._watch_lock = threading.Lock()

    def confirmed(self, *, sent_at: float) -> None:
        """A renewal sent at monotonic ``sent_at`` was confirmed."""
        self.deadline = max(self.deadline, sent_at + self.lease_seconds - self.margin)

    def revoked(self, *, cancelled: bool = False) -> None:
        """A renewal was refused: the lease is gone (``cancelled``: the run was cancelled).
        Whatever the execution waits on in the engine stops waiting."""
        self.deadline = -math.inf
        self.cancelled = self.cancelled or cancelled
        self.stopped.set()
        with self._watch_lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher()

    def watch(self, watcher: Callable[[], None]) -> Callable[[], None]:
        """Call ``watcher`` (from the renewer's thread) when the lease is revoked, at once if it
        is already; returns the function that stops watching."""
        with self._watch_lock:
            self._watchers.append(watcher)
        if self.stopped.is_set():
            watcher()

        def unwatch() -> None:
            with self._watch_lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)

        return unwatch

    def after_previous_holder(
        self, *, prior_expiry: datetime | None, now: datetime, at: float
    ) -> None:
        """Wait, before touching a previous execution's effects, until ``prior_expiry`` plus the
        margin has passed: ``now`` is the claimant's wall clock at monotonic time ``at``."""
        if prior_expiry is None:
            return
        left = (prior_expiry - now).total_seconds() + self.margin
        self.quiet_at = at + max(0.0, left)

    def wait_out_previous_holder(self, step_id: str) -> None:
        """Sleep until no previous holder of the lease can still send an effect (at most the
        margin past the previous lease's expiry; usually not at all)."""
        left = self.previous_holder_left(step_id)
        if left > 0:
            time.sleep(left)

    def previous_holder_left(self, step_id: str) -> float:
        """Seconds until no previous holder of the lease can still send an effect (0: none);
        the caller waits them out (an async run on its loop, without a thread)."""
        left = self.quiet_at - time.monotonic()
        if left > 0:
            log.info(
                "run %s, step %s: waiting %.2fs for the previous lease holder's window to end",
                self.run_id,
                step_id,
                left,
            )
        return max(0.0, left)

    def check(self, step_id: str) -> None:
        """Immediately before an effect leaves the process: ``LeaseExpired`` past the deadline."""
        faultpoints.point("engine.before_send")
        self.recheck(step_id)

    def recheck(self, step_id: str) -> None:
        """``check`` without its fault point: an async run checks on its ledger thread and
        again on the loop, immediately before the tool call, after the hop between them."""
        late = time.monotonic() - self.deadline
        if late >= 0:
            raise LeaseExpired(
                f"run {self.run_id}: step {step_id!r} not sent: no lease renewal confirmed "
                f"within {self.lease_seconds - self.margin:.1f}s (lease {self.lease_seconds}s "
                f"less the {self.margin}s effect margin; {late:.1f}s past); another worker may "
                "hold the run"
            )
