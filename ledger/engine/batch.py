"""Batched durability: steps whose results wait in memory to be committed together.

An agent registered with ``durability="batched"`` does not pay one commit per read, model or
clock step. Its live steps (``ledger.engine.live``) keep each such step's finished row here and
commit the waiting rows in one statement (``transitions.step_write_batch``):

- together with the next write of any other kind, in the same transaction — above all an
  effect's intent row, so that an effect is never sent before every step ahead of it is
  durable (the intent commits only with them, and the effect leaves only after the intent);
- before a fan-out starts (its siblings commit from their own connections);
- at the end of the execution, in the transaction that records how it ended;
- once ``max_steps`` rows wait, or the oldest has waited ``max_seconds`` (checked whenever a
  step is about to execute or has just been added). On PostgreSQL such a full batch commits on
  a thread of its own (``Flusher``) while the agent goes on; every other write waits for it.

What a crash loses is only what waits here: steps that executed but were never committed. The
resume finds the ledger as it was at the last commit and executes them again, so they must be
safe to repeat — reads, model calls and clock readings are; effects never wait here. Steps that
wrote a row before (a retried failure, a step after a replan, an expired read) are written at
once, after the waiting ones.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from django.db import connections

from ledger.conf import conf
from ledger.registry import Agent
from ledger.transitions.steps import StepWrite

#: The clock of the time bound (a test replaces it, and only it).
_monotonic = time.monotonic


class Batch:
    """The rows of finished steps not committed yet, in chain order."""

    def __init__(self, *, max_steps: int, max_seconds: float) -> None:
        self.max_steps = max_steps
        self.max_seconds = max_seconds
        self._writes: list[StepWrite] = []
        self._since = 0.0  # _monotonic() when the oldest waiting row was added

    @classmethod
    def for_agent(cls, agent: Agent) -> Batch | None:
        """The agent's batch, or None when it commits every step (durability ``step``)."""
        if agent.durability != "batched":
            return None
        steps = agent.batch_steps or conf.RUNLEDGER_BATCH_MAX_STEPS
        ms = conf.RUNLEDGER_BATCH_MAX_MS if agent.batch_ms is None else agent.batch_ms
        return cls(max_steps=steps, max_seconds=ms / 1000)

    def __len__(self) -> int:
        return len(self._writes)

    def add(self, write: StepWrite) -> None:
        if not self._writes:
            self._since = _monotonic()
        self._writes.append(write)

    def due(self) -> bool:
        """Rows wait and one bound is reached: commit them now."""
        if not self._writes:
            return False
        return len(self._writes) >= self.max_steps or _monotonic() - self._since >= self.max_seconds

    def take(self) -> list[StepWrite]:
        """The waiting rows, in chain order; the batch is empty afterwards."""
        writes, self._writes = self._writes, []
        return writes


class Flusher:
    """Commits full batches on a thread of its own while the agent goes on (PostgreSQL).

    The thread has its own database connection; batches commit one after another in the order
    they were handed over (each links the last row of the one before). ``sync`` waits until
    every batch handed over has committed and raises the first failure (``LeaseLost``,
    ``LedgerUnavailable``): the live steps call it before any other ledger write — an effect's
    intent above all — so the order of commits, and the invariant, are those of a synchronous
    batch. After a failure nothing more is written and every later call raises it.
    """

    def __init__(self, write: Callable[[list[StepWrite]], None], *, name: str) -> None:
        self._write = write
        self._name = name
        self._queue: queue.Queue[list[StepWrite] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, writes: list[StepWrite]) -> None:
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        self._queue.put(writes)

    def sync(self) -> None:
        """Every batch handed over is committed; or raise why not."""
        if self._thread is not None:
            self._queue.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Commit what was handed over (a dying execution's full batches too), then stop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _work(self) -> None:
        try:
            while True:
                writes = self._queue.get()
                try:
                    if writes is None:
                        return
                    if self._error is None:
                        self._write(writes)
                except BaseException as exc:  # raised again in the agent's thread, at sync
                    self._error = exc
                finally:
                    self._queue.task_done()
        finally:
            connections.close_all()  # this thread's own connection
