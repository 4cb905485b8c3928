"""The live steps: replay, reconcile or execute each call and write the ledger, fenced.

For each call (after the path check):

1. ``decide`` says what to do with its row (see ``ledger.engine.decide``);
2. a replay returns the stored result; a stale row raises ``StaleCheckpoint``;
3. a started effect goes to its tool's reconcile(effect_key): a result is committed as
   ``succeeded``, ``NOT_HAPPENED`` executes again with the same key, ``None`` raises
   ``NeedsReconciliation``;
4. otherwise it executes: an effect commits ``started`` with its effect key, calls the tool with
   that key as its idempotency key, then commits ``succeeded`` (two commits, no I/O inside a
   transaction); a read, model call or clock read commits once, after.

Effects are fenced too (``ledger.engine.fence``): an effect leaves the process only after the
lease's local deadline is checked, right before the tool call; and an effect a previous
execution attempted is looked up or sent again only after that holder's window has ended.

The previous step's ``next_step_id`` is written in the same statement as the next step's first
write. Every write goes through ``ledger.transitions`` and is fenced by the run's lease token.

Under batched durability (``ledger.engine.batch``) a read, model or clock step executed for the
first time on the walk is not committed at once: its row waits in the batch, and the waiting
rows commit in the same transaction as the next other write (an effect's intent first of all),
before a fan-out, at the end of the execution, or when the batch's bounds are reached.

Fan-out siblings run on threads: each is an ordinary step (its own row, its own fenced
commits, on the thread's own database connection), so a crash re-runs only the siblings
without a settled row.

Async agents (``ledger.engine.aio``): the logic above is written once, as generators that yield
what leaves the process — ``_Send`` (the tool, model or clock call), ``_Ask`` (a lookup),
``_Wait`` (a back-off, or the previous holder's window) — and are sent the answer (or have
its exception thrown in, where the old code caught it). ``step``/``fanout`` drive them in line
for a sync agent, exactly as before; ``astep``/``afanout`` advance them on a ledger thread
(decisions and writes, then the connection is given back) and do the requests on the loop,
the lease checked again immediately before an effect's call. A fan-out's siblings are tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, connections, transaction
from django.utils import timezone

from ledger import canonical, faultpoints, observe, ratelimits, transitions, usage
from ledger.conf import conf
from ledger.engine import aio, drain, failures, gate, pooling
from ledger.engine.batch import Batch, Flusher
from ledger.engine.calls import Call, describe, misfit, storable
from ledger.engine.decide import Action, StepRow, decide
from ledger.engine.fence import LeaseFence
from ledger.engine.holds import Holds
from ledger.engine.walk import Walk
from ledger.errors import (
    ApprovalRejected,
    BudgetExhausted,
    HandedBack,
    LeaseLost,
    LedgerUnavailable,
    NeedsReconciliation,
    NotJSON,
    QuestionAsked,
    RateLimited,
    RetryLater,
    RunCancelled,
    StaleCheckpoint,
    StepFailed,
    Waiting,
)
from ledger.models import StepKind, StepStatus
from ledger.registry import NOT_HAPPENED, get_tool
from ledger.retry import RetryPolicy
from ledger.transitions import ratelimits as rate_writes
from ledger.transitions.steps import StepWrite, stored_inputs

log = logging.getLogger(__name__)

#: ``Step.settled_by`` of a started effect whose outcome the tool's lookup answered on a resume.
SETTLED_BY_LOOKUP = "lookup (the tool's reconcile, on resume)"

Clock = Callable[[], datetime]

#: How often a call waiting for its rate-limit slot looks at the clock again (a test's clock
#: may jump; a real one is waited on in one piece but for this).
RATE_POLL_SECONDS = 0.25


@dataclass
class _Job:
    """A fan-out sibling that needs work (execute, reconcile, or re-read) on a thread."""

    call: Call
    row: StepRow | None
    prev: str | None
    abandon: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Send:
    """What leaves the process: the call's tool (or model, or clock) under effect key ``key``;
    ``fenced`` (an effect): only while the lease is provably ours."""

    call: Call
    key: str | None
    fenced: bool = False


@dataclass(frozen=True)
class _Ask:
    """A lookup: ask the downstream system what became of the effect under ``key``."""

    lookup: Callable[[str], Any]
    key: str


@dataclass(frozen=True)
class _Wait:
    """A wait: a retry's back-off (``backoff``, on the execution's sleep), else the previous
    lease holder's window (real time)."""

    seconds: float
    backoff: bool


#: The engine's step logic is written once as generators that yield what must leave the process
#: (a ``_Send``, an ``_Ask`` or a ``_Wait``) and are sent its answer: ``LiveSteps._drive`` does
#: each in line (a sync agent), ``LiveSteps._adrive`` on the event loop with the ledger writes
#: on threads (an async agent; ``ledger.engine.aio``).
Request = _Send | _Ask | _Wait
StepGen = Generator[Request, Any, Any]


class _Stopped(Exception):
    """The lease went while a model call or a wait was in progress (a cancel, a takeover): the
    driver closes the step's generator and raises ``RunCancelled`` or ``LeaseLost``."""


_STALE_WHY = {
    StepStatus.SUCCEEDED: "stored input hash {stored}… differs from today's {today}…; the stored "
    "result answers another question",
    StepStatus.STARTED: "this effect was started with other inputs; settle it before the run "
    "goes on",
    StepStatus.FAILED: "this effect was attempted under key {key} with other inputs; settle it "
    "before it is sent with today's",
}


class LiveSteps:
    """Executes and records the calls of one execution that holds the run's lease."""

    def __init__(
        self,
        *,
        walk: Walk,
        token: str,
        fence: LeaseFence,
        clock: Clock,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        holds: Holds | None = None,
    ) -> None:
        self.walk = walk
        self._sleep, self._rand = sleep, rand  # a retry's back-off: passed in, faked in tests
        self.run_id = walk.run_id
        self._token = token
        self._fence = fence
        self._clock = _direct(clock)
        self._holds = holds or Holds()
        self._batch = Batch.for_agent(walk.agent)
        # Read once per execution: a lazy settings lookup on every step costs more than it says.
        self._max_steps = conf.RUNLEDGER_MAX_STEPS_PER_RUN
        self._max_input_bytes = conf.RUNLEDGER_MAX_STORED_INPUT_BYTES
        self._rate_setting = conf.RUNLEDGER_RATE_LIMITS
        self._rate_takes: dict[tuple[str, str], list[ratelimits.Take]] = {}
        self._kept: dict[str, set[str]] | None = None  # the run's kept slots: step -> keys
        # Full batches commit on a thread of their own where threads get their own connections
        # (PostgreSQL); the SQLite demo commits them in line.
        self._flusher = (
            Flusher(self._write_batch, name=f"batch-{self.run_id}")
            if self._batch is not None and connection.vendor == "postgresql"
            else None
        )

    @property
    def lease_token(self) -> str:
        """The lease token this execution's writes are fenced with."""
        return self._token

    # --- one step -------------------------------------------------------------------------

    def step(self, call: Call) -> Any:
        """Replay, settle or execute one call of a sync agent, on the calling thread."""
        return self._drive(self._step(call))

    async def astep(self, call: Call) -> Any:
        """The same for an async agent: the decisions and writes on a ledger thread, the tool
        call on the loop. A replay that needs no table returns at once, in line."""
        if self._replays_in_memory(call):
            return self._drive(self._step(call))
        return await self._adrive(self._step(call))

    def _replays_in_memory(self, call: Call) -> bool:
        row = self.walk.live_row(call.step_id)
        if row is None or row.status != StepStatus.SUCCEEDED:
            return False
        if self._batch is not None and self._batch.due():
            return False
        now = self._clock()
        return decide(kind=call.kind, input_hash=call.input_hash, row=row, now=now) == Action.REPLAY

    def _step(self, call: Call) -> StepGen:
        self._holds.check_whole(call.step_id)
        row = self.walk.live_row(call.step_id)
        if drain.requested() and (row is None or row.status != StepStatus.SUCCEEDED):
            raise HandedBack(call.step_id)  # the worker is stopping: before a step executes
        if self._fence.cancelled and (row is None or row.status != StepStatus.SUCCEEDED):
            raise RunCancelled(self.run_id)  # cancelled: nothing more executes
        abandon = self.walk.check_path(call.step_id)
        if call.step_id not in self.walk.ledger:
            self._check_history(1, call.step_id)
        if self._batch is not None and self._batch.due():
            self._flush_soon()
        try:
            with pooling.step_connection():  # the next step's wait holds no connection
                if call.wait is not None:
                    result = yield from self._run_wait(
                        call, row, prev=self.walk.prev, abandon=abandon
                    )
                else:
                    result = yield from self._run(
                        call,
                        row,
                        prev=self.walk.prev,
                        abandon=abandon,
                        batchable=self._batch is not None,
                    )
        except ApprovalRejected:
            self.walk.advance(call.step_id)  # its row records the rejection on the path
            raise
        self.walk.advance(call.step_id)
        return result

    # --- the drivers -----------------------------------------------------------------------

    def _drive(self, gen: StepGen) -> Any:
        """Run a step's generator on this thread, doing each request in line."""
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = gen.send(value) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = self._do(request)
            except _Stopped:
                gen.close()
                raise self._stop_error() from None
            except BaseException as exc:  # the generator handles it as the old code did
                error = exc

    def _do(self, request: Request) -> Any:
        if isinstance(request, _Send):
            if request.call.kind == StepKind.MODEL and self._fence.watched:
                return self._unless_stopped(request.call.execute, request.key)
            return request.call.execute(request.key)
        if isinstance(request, _Ask):
            return aio.call_sync(request.lookup, request.key)  # an async lookup: on the loop
        if request.backoff and self._sleep is not time.sleep:
            self._sleep(request.seconds)  # a test's clock
        elif self._fence.stopped.wait(request.seconds):
            raise _Stopped
        return None

    def _unless_stopped(self, fn: Callable[[str | None], Any], key: str | None) -> Any:
        """``fn(key)`` (a model call) on a thread of its own while this one waits for its answer
        or for the lease to go (a cancel), whichever comes first: a cancel does not wait out a
        30 s model call. The abandoned call's answer is dropped when it comes."""
        if self._fence.stopped.is_set():
            raise _Stopped
        answer: Future[Any] = Future()
        woken = threading.Event()

        def call() -> None:
            try:
                answer.set_result(aio.call_sync(fn, key))
            except BaseException as exc:  # handed to the waiting thread as it is
                answer.set_exception(exc)
            finally:
                woken.set()
                connections.close_all()

        unwatch = self._fence.watch(woken.set)
        context = contextvars.copy_context()  # the execution's log fields go with the call
        try:
            threading.Thread(
                target=context.run, args=(call,), name=f"model-{self.run_id}", daemon=True
            ).start()
            woken.wait()
        finally:
            unwatch()
        if not answer.done():
            raise _Stopped
        return answer.result()

    def _stop_error(self) -> BaseException:
        """What a stopped wait raises: ``RunCancelled`` after a cancel, else ``LeaseLost``."""
        if self._fence.cancelled:
            return RunCancelled(self.run_id)
        return LeaseLost(f"run {self.run_id}: the lease was taken while the step waited")

    @property
    def cancelled(self) -> bool:
        """The run was cancelled while this execution runs (seen by the lease renewer)."""
        return self._fence.cancelled

    def emit(self, step_id: str, kind: str, data: Any) -> None:
        """Append ``ctx.emit``'s event to the run's stream once (a replay's finds it there)."""
        if self._fence.cancelled:
            raise RunCancelled(self.run_id)
        self._commit(
            step_id,
            "emit",
            lambda: transitions.stream_append(
                run_id=self.run_id,
                token=self._token,
                step_id=step_id,
                kind=kind,
                data=data,
                clock=self._clock,
            ),
        )

    async def aemit(self, step_id: str, kind: str, data: Any) -> None:
        await aio.ledger_phase(self.emit, step_id, kind, data)

    async def _adrive(self, gen: StepGen) -> Any:
        """Run a step's generator for an async agent: each advance (decisions, ledger writes)
        on a ledger thread that gives its connection back; each request on the loop."""
        value: Any = None
        error: BaseException | None = None
        while True:
            done, request, result = await aio.ledger_phase(_advance, gen, value, error)
            if done:
                return result
            assert request is not None
            value, error = None, None
            if isinstance(request, _Send) and request.fenced:
                try:  # checked on the ledger thread; again here, immediately before it leaves
                    self._fence.recheck(request.call.step_id)
                except LeaseLost:
                    gen.close()
                    raise
            try:
                value = await self._ado(request)
            except _Stopped:
                gen.close()
                raise self._stop_error() from None
            except BaseException as exc:
                error = exc

    async def _ado(self, request: Request) -> Any:
        if isinstance(request, _Send):
            call = request.call
            if call.kind == StepKind.CLOCK:
                return call.execute(request.key)  # a clock read: nothing to wait for
            if call.kind == StepKind.MODEL and self._fence.watched:
                return await self._aunless_stopped(self._asend(call, request.key))
            return await self._asend(call, request.key)
        if isinstance(request, _Ask):
            return await aio.call_async(request.lookup, request.key)
        if request.backoff and self._sleep is not time.sleep:
            waited = self._sleep(request.seconds)  # a test's clock, or an async sleep
            if inspect.isawaitable(waited):
                await waited
            return None
        if self._fence.watched:
            await self._aunless_stopped(asyncio.sleep(request.seconds))
        else:
            await asyncio.sleep(request.seconds)
        return None

    @staticmethod
    async def _asend(call: Call, key: str | None) -> Any:
        if call.is_async:
            value = call.execute(key)
            return await value if inspect.isawaitable(value) else value
        return await aio.call_async(call.execute, key)

    async def _aunless_stopped(self, work: Any) -> Any:
        """Await ``work`` unless the lease goes first (a cancel): then the task is cancelled (an
        async model client's request ends at once) and ``_Stopped`` raised."""
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[None] = loop.create_future()
        task = asyncio.ensure_future(work)

        def resolve() -> None:
            if not stop.done():
                stop.set_result(None)

        def revoked() -> None:  # on the renewer's thread
            loop.call_soon_threadsafe(resolve)

        unwatch = self._fence.watch(revoked)
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            unwatch()
        if task.done():
            stop.cancel()
            return task.result()
        task.cancel()
        raise _Stopped

    def flush(self) -> None:
        """Batched durability: return once every step executed so far is committed."""
        if self._batch is None:
            return
        if self._flusher is not None:
            self._flusher.sync()
        if len(self._batch):
            self._write_batch(self._batch.take())

    def sync_flusher(self) -> None:
        """The batches handed to the flusher thread are committed (or raise why not)."""
        if self._flusher is not None:
            self._flusher.sync()

    def close(self) -> None:
        """The execution is over: full batches handed to the flusher commit, its thread ends."""
        if self._flusher is not None:
            self._flusher.close()

    def _flush_soon(self) -> None:
        """The batch is due: commit it, on the flusher's thread where there is one."""
        assert self._batch is not None
        if self._flusher is None:
            self.flush()
        else:
            self._flusher.submit(self._batch.take())

    @staticmethod
    def _write_batch(writes: list[StepWrite]) -> None:
        with _ledger_write(writes[0].step_id, "batch"):
            transitions.step_write_batch(writes)

    def _commit(self, step_id: str, what: str, write: Callable[[], Any]) -> Any:
        """One ledger write; the steps waiting in the batch commit first, in its transaction
        (an effect's intent is never durable before the steps ahead of it)."""
        if self._flusher is not None:
            self._flusher.sync()
        if self._batch is None or not len(self._batch):
            with _ledger_write(step_id, what):
                return write()
        waiting = self._batch.take()
        with _ledger_write(step_id, what), transaction.atomic():
            transitions.step_write_batch(waiting)
            return write()

    def _run(
        self,
        call: Call,
        row: StepRow | None,
        *,
        prev: str | None,
        abandon: list[str],
        batchable: bool = False,
    ) -> StepGen:
        """Replay, settle or execute one step; ``prev`` is the step whose link it writes.

        Touches no per-execution state but the walk's counters and in-memory ledger (under
        its lock), so that fan-out siblings can run it on their own threads.
        """
        action = (
            Action.EXECUTE  # no row: nothing to compare, no clock to read
            if row is None
            else decide(kind=call.kind, input_hash=call.input_hash, row=row, now=self._clock())
        )
        if action == Action.STALE:
            assert row is not None
            raise StaleCheckpoint(call.step_id, _stale_detail(call, row))
        if action == Action.REPLAY:
            assert row is not None
            self.walk.count(replayed=1)
            self._replayed(call)
            return row.result
        self._holds.check_tool(call.step_id, call.tool)  # it would reach the tool
        if action == Action.RECONCILE:
            assert row is not None
            settled = yield from self._reconcile(call, row)
            if settled is not NOT_HAPPENED:
                return settled
        elif action == Action.RECHECK:
            assert row is not None
            if (yield from self._failed_effect_happened(call, row)):
                return row.result
        result = yield from self._execute(
            call, row, prev=prev, abandon=abandon, batchable=batchable and row is None
        )
        self.walk.count(executed=1)
        return result

    # --- sleeps and waits for events -------------------------------------------------------

    def _run_wait(
        self, call: Call, row: StepRow | None, *, prev: str | None, abandon: list[str]
    ) -> StepGen:
        """A ``ctx.sleep`` or ``ctx.wait_for_event``: its row is written ``pending`` with its due
        time at its first execution (the due time every later execution reads: a resume after a
        crash neither shortens nor repeats the wait), then ``succeeded`` once it is due or its
        event is taken (``transitions.mailbox_take``: the event and the step in one
        transaction). A short wait happens holding the run; a long one releases it (``Waiting``)."""
        spec = call.wait
        assert spec is not None
        if row is not None and row.input_hash != call.input_hash:
            raise StaleCheckpoint(call.step_id, _stale_detail(call, row))
        if row is not None and row.status == StepStatus.SUCCEEDED:
            self.walk.count(replayed=1)
            self._replayed(call)
            return row.result
        if row is not None and isinstance(row.result, dict) and "due" in row.result:
            pk, due = row.pk, _due(row.result["due"])
        else:
            due = spec.due(self._clock())
            pk = self._begin_wait(call, due, prev=prev, abandon=abandon)
        while True:
            if spec.event is not None:
                taken = self._take_event(call, pk, spec.event)
                if taken is not None:
                    self.walk.count(executed=1)
                    return taken
            left = float("inf") if due is None else (due - self._clock()).total_seconds()
            if left <= 0:
                self.walk.count(executed=1)
                return self._end_wait(call, pk, due, timed_out=spec.event is not None)
            if spec.question is not None:  # a person answers: the run stops until then
                raise QuestionAsked(
                    call.step_id, f"waiting for a person's answer: {spec.question}", wake_at=due
                )
            if left > conf.RUNLEDGER_SLEEP_HOLD_SECONDS:
                raise Waiting(
                    call.step_id,
                    wake_at=due,
                    event=spec.event or "",
                    detail=_wait_detail(spec, due),
                )
            poll = conf.RUNLEDGER_EVENT_POLL_SECONDS if spec.event is not None else left
            yield _Wait(min(left, poll), backoff=True)

    def _begin_wait(
        self, call: Call, due: datetime | None, *, prev: str | None, abandon: list[str]
    ) -> int:
        """The wait's first write: ``pending``, its due time as its result, linked to ``prev``."""
        seq = call.seq or self.walk.take_seq()
        write = self._write(call, seq=seq, attempt=1, key=None, errors=[])
        write.prev_step_id, write.abandon = prev, abandon
        write.status = StepStatus.PENDING
        data = {"due": due.isoformat() if due is not None else None}
        write.result_json = canonical.dumps(data)
        pk: int = self._commit(call.step_id, "wait", partial(transitions.step_write, write))
        self._remember(call, write, data, None, [], prev=prev, status=StepStatus.PENDING)
        self.walk.ledger[call.step_id].pk = pk
        return pk

    def _take_event(self, call: Call, pk: int, name: str) -> Any:
        now = self._clock()
        taken = self._commit(
            call.step_id,
            "event",
            lambda: transitions.mailbox_take(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                step_id=call.step_id,
                name=name,
                now=now,
            ),
        )
        if taken is not None:
            self._settled_wait(call, taken)
        return taken

    def _end_wait(self, call: Call, pk: int, due: datetime | None, *, timed_out: bool) -> Any:
        result: dict[str, Any] = {"due": due.isoformat() if due is not None else None}
        if timed_out:
            result["timed_out"] = True
        self._commit(
            call.step_id,
            "wait",
            lambda: transitions.step_update(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                status=StepStatus.SUCCEEDED,
                now=self._clock(),
                result_json=canonical.dumps(result),
            ),
        )
        self._settled_wait(call, result)
        return result

    def _settled_wait(self, call: Call, result: Any) -> None:
        with self.walk.lock:
            row = self.walk.ledger[call.step_id]
            row.status, row.result = StepStatus.SUCCEEDED, result

    def _check_history(self, new_rows: int, step_id: str) -> None:
        """Bound the ledger: past RUNLEDGER_MAX_STEPS_PER_RUN rows the run stops (budget)."""
        limit = self._max_steps
        rows = len(self.walk.ledger)
        if rows + new_rows <= limit:
            return
        raise BudgetExhausted(
            step_id,
            f"history limit reached: the run has {rows} steps and "
            f"RUNLEDGER_MAX_STEPS_PER_RUN is {limit}; the agent should continue_as_new "
            "(carry its results into a new run) before its ledger grows this long",
        )

    # --- effects whose outcome is in doubt --------------------------------------------------

    def _failed_effect_happened(self, call: Call, row: StepRow) -> Generator[Request, Any, bool]:
        """A failed effect is asked about before it is sent again: its last attempt may have
        reached the downstream system before the error (a timeout after the charge)."""
        if not call.reconcile:
            return False
        assert row.effect_key is not None
        yield from self._wait_out_previous_holder(call.step_id)
        answer = yield _Ask(call.reconcile, row.effect_key)
        if answer is None or answer is NOT_HAPPENED:
            return False  # send again under the same key, as the tool's retry policy allows
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON:
            return False
        self._settle(row, data, text)
        return True

    def _reconcile(self, call: Call, row: StepRow) -> StepGen:
        """A started effect: ask the downstream system through the effect key."""
        assert row.effect_key is not None
        if call.reconcile is None:
            observe.emit("reconciled", answer="no_read_path")
            raise NeedsReconciliation(
                call.step_id,
                f"effect {call.tool!r} was started under key {row.effect_key} and the crash "
                "left its outcome unknown; the tool has no read path to ask",
            )
        yield from self._wait_out_previous_holder(call.step_id)
        answer = yield _Ask(call.reconcile, row.effect_key)
        observe.emit("reconciled", answer=_answer_name(answer))
        if answer is None:
            raise NeedsReconciliation(
                call.step_id,
                f"{call.tool!r} could not say whether key {row.effect_key} took effect",
            )
        if answer is NOT_HAPPENED:
            log.info(
                "run %s: %s did not happen; executing with the same key",
                self.run_id,
                row,
                extra={"step_id": call.step_id},
            )
            return NOT_HAPPENED
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON as exc:
            raise NeedsReconciliation(call.step_id, f"reconcile answered non-JSON: {exc}") from exc
        self._settle(row, data, text)
        return data

    def look_up_started(self) -> list[str]:
        """Before a divergence stops the run: ask each started effect's tool, through its
        lookup, what became of it, and commit a definite answer (happened: ``succeeded``; did
        not happen: ``pending``, keeping its key, as a person's "it did not happen" would).
        Returns one line per effect for the stop's detail."""
        notes = []
        for row in sorted(self.walk.ledger.values(), key=lambda r: r.seq):
            if row.kind != StepKind.EFFECT or row.status != StepStatus.STARTED:
                continue
            tool = get_tool(row.tool)
            if tool is None or tool.reconcile is None or row.effect_key is None:
                notes.append(f"{row.step_id}: started, no lookup to ask; settle it by hand")
                continue
            self._fence.wait_out_previous_holder(row.step_id)
            try:
                if tool.reconcile_takes_fencing_token:
                    answer = aio.call_sync(
                        tool.reconcile, row.effect_key, fencing_token=self._fence.token
                    )
                else:
                    answer = aio.call_sync(tool.reconcile, row.effect_key)
            except Exception as exc:
                notes.append(f"{row.step_id}: the lookup failed ({describe(exc)})")
                continue
            observe.emit("reconciled", answer=_answer_name(answer))
            notes.append(f"{row.step_id}: {self._record_lookup(row, answer)}")
        return notes

    def _record_lookup(self, row: StepRow, answer: Any) -> str:
        if answer is None:
            return "the lookup could not say; settle it by hand"
        if answer is NOT_HAPPENED:
            absent = f"the lookup found no effect under key {row.effect_key}"
            self._settle(row, None, None, status=StepStatus.PENDING, error=absent)
            return f"{absent} (it stays unsent)"
        try:
            data, text = canonical.canonical(answer, step_id=row.step_id)
        except NotJSON as exc:
            return f"the lookup answered something that is not JSON ({exc})"
        self._settle(row, data, text)
        return f"the lookup found it happened under key {row.effect_key}; recorded as succeeded"

    def _settle(
        self,
        row: StepRow,
        data: Any,
        text: str | None,
        *,
        status: StepStatus = StepStatus.SUCCEEDED,
        error: str = "",
    ) -> None:
        """Commit the downstream system's answer as the effect's result (one fenced write);
        ``status`` pending: it proved the effect absent (the key stays, for the next send)."""
        self._commit(
            row.step_id,
            "settlement",
            lambda: transitions.step_update(
                run_id=self.run_id,
                token=self._token,
                pk=row.pk,
                status=status,
                now=self._clock(),
                result_json=text,
                error=error,
                errors_json=canonical.dumps(row.errors),
                settled_by=SETTLED_BY_LOOKUP,
            ),
        )
        row.status, row.result = status, data

    # --- executing --------------------------------------------------------------------------

    def _execute(
        self,
        call: Call,
        row: StepRow | None,
        *,
        prev: str | None,
        abandon: list[str],
        batchable: bool = False,
    ) -> StepGen:
        attempt = row.attempt + 1 if row is not None else 1
        seq = row.seq if row is not None else call.seq or self.walk.take_seq()
        errors = list(row.errors) if row is not None else []
        left = _retries_left(call, row)
        if row is not None and row.status == StepStatus.FAILED:
            yield from self._wait_pending(call, row)  # a retry whose wait had not ended
        effect = call.kind == StepKind.EFFECT
        key = None
        if effect:
            key = row.effect_key if row is not None and row.effect_key else self._effect_key(call)
            if row is not None:  # a previous execution attempted it: let its window end first
                yield from self._wait_out_previous_holder(call.step_id)
        gate_id = None
        if effect and call.approval is not None and (row is None or not row.effect_key):
            # No intent yet: a person approves these exact arguments first (ledger.engine.gate).
            gate_id = self._gate(call, row, seq=seq, prev=prev, abandon=abandon)
        first_write = True
        pk: int | None = None
        while True:
            yield from self._paced(call)  # its rate limits' slot, before anything is written
            write = self._write(call, seq=seq, attempt=attempt, key=key, errors=errors)
            began = write.now
            if first_write:
                write.prev_step_id, write.abandon = prev, abandon
            if effect:
                write.status = StepStatus.STARTED
                intent = partial(transitions.step_write, write)
                if gate_id is not None and first_write:
                    intent = partial(self._intent_under_gate, call, write, gate_id)
                pk = self._commit(call.step_id, "intent", intent)
                first_write = False
                self._fence.check(call.step_id)  # the intent is committed; the effect not sent
            bad_arguments = False
            failure: BaseException
            try:
                outcome = yield _Send(call, key, fenced=effect)
                data, text = canonical.canonical(outcome, step_id=call.step_id)
            except NotJSON as exc:
                if effect:
                    raise NeedsReconciliation(
                        call.step_id,
                        storable(f"the effect ran but returned a result that is not JSON: {exc}"),
                    ) from exc
                failure, error = exc, storable(str(exc))  # the path may hold the odd key itself
            except Exception as exc:
                failure, error = exc, describe(exc)
                bad_arguments = isinstance(exc, TypeError) and misfit(call)
            else:
                self._charge(call, data)
                self._finished(call, write, text, data)
                if batchable and not effect and not abandon and not errors:
                    self._wait_in_batch(write)
                else:
                    self._commit_success(call, write, pk)
                self._remember(call, write, data, key, errors, prev=prev)
                self._step_finished(call, write, began, write.now)
                return data
            self._pace_failure(call, failure)
            record, wait = self._failure(call, failure, attempt, left, bad_arguments, error)
            errors.append(record)
            self._commit_failure(write, pk, error, errors)
            self._step_finished(call, write, began, self._clock(), error=error)
            first_write = False
            self._remember(call, write, None, key, errors, prev=prev, status=StepStatus.FAILED)
            if wait is None:
                raise StepFailed(call.step_id, attempt, error)
            left -= 1
            yield from self._pause(call, wait, attempt + 1)
            attempt += 1

    # --- rate limits (ledger.ratelimits) ----------------------------------------------------

    def _takes(self, call: Call) -> list[ratelimits.Take]:
        """The limits a call takes a slot of (cached per tool and model for the execution)."""
        cache_key = (call.tool, call.model_id)
        found = self._rate_takes.get(cache_key)
        if found is None:
            found = self._rate_takes[cache_key] = ratelimits.takes(
                tool=call.tool,
                kind=call.kind,
                model=call.model_id,
                declared=call.source.rate_limit if call.source is not None else None,
                setting=self._rate_setting,
            )
        return found

    def _paced(self, call: Call) -> StepGen:
        """Wait for the call's slot of each of its rate limits (none: no query at all). A slot
        at most RUNLEDGER_RATE_LIMIT_HOLD_SECONDS away is waited for holding the run; a later
        one is kept for the run (``RateHold``) and the run released (``RateLimited``) until a
        little before it. A slot kept by an earlier execution is used if it has not gone by."""
        takes = self._takes(call)
        if not takes:
            return
        with _ledger_write(call.step_id, "rate limit"):  # no slot, no send
            kept = self._kept_slots(call.step_id)
        while True:
            now = self._clock()
            with _ledger_write(call.step_id, "rate limit"):
                slots = self._slots(takes, kept, now)
            last, due = max(slots.items(), key=lambda item: item[1])
            wait = (due - now).total_seconds()
            if wait <= 0:
                return
            detail = ratelimits.waiting_detail(last, wait)
            hold = conf.RUNLEDGER_RATE_LIMIT_HOLD_SECONDS
            if wait > hold:
                reserved = {t.row: s for t, s in slots.items() if t.budget == "requests"}
                with _ledger_write(call.step_id, "rate limit"):
                    rate_writes.rate_hold(run_id=self.run_id, step_id=call.step_id, slots=reserved)
                # Woken a little early (the claim and the replay take time), it waits the rest.
                raise RateLimited(call.step_id, wait - min(hold / 2, 5.0), detail)
            log.info("run %s: %s", self.run_id, detail, extra={"step_id": call.step_id})
            while (left := (due - self._clock()).total_seconds()) > 0:
                yield _Wait(min(left, RATE_POLL_SECONDS), backoff=True)
            # A 429 seen meanwhile blocks the keys: the slots taken before it are not used.
            rows = [t.row for t in takes]
            with _ledger_write(call.step_id, "rate limit"):
                blocked = rate_writes.rate_blocked_until(keys=rows, now=self._clock())
            if blocked is None:
                return

    @staticmethod
    def _slots(
        takes: list[ratelimits.Take], kept: dict[str, datetime], now: datetime
    ) -> dict[ratelimits.Take, datetime]:
        """Each limit's slot for the call: the one kept for it if it has not gone by (used
        late it could crowd the next one), else a new one, taken now."""
        slots = {}
        for take in takes:
            slot = kept.pop(take.row, None)
            if slot is None or slot < now:
                cost = 1.0 if take.budget == "requests" else 0.0
                slot = rate_writes.rate_take(take=take, now=now, cost=cost)
            slots[take] = slot
        return slots

    def _kept_slots(self, step_id: str) -> dict[str, datetime]:
        """The slots an earlier execution of this run kept for ``step_id`` (one query per
        execution that reaches a limited call; taken from the table when found)."""
        if self._kept is None:
            self._kept = rate_writes.rate_holds_of(run_id=self.run_id)
        if step_id not in self._kept:
            return {}
        self._kept.pop(step_id)
        return rate_writes.rate_holds_take(run_id=self.run_id, step_id=step_id)

    def _charge(self, call: Call, answer: Any) -> None:
        """A model call's tokens, paid to its tokens limit after the call."""
        for take in self._takes(call):
            if take.budget == "tokens":
                used = ratelimits.tokens_used(answer)
                try:
                    rate_writes.rate_charge(take=take, tokens=used, now=self._clock())
                except DatabaseError as exc:  # the answer counts more than one charge
                    log.warning("run %s: %s's tokens not charged (%s)", self.run_id, take.key, exc)

    def _pace_failure(self, call: Call, exc: BaseException) -> None:
        """A limited call answered 429 with retry-after (or raised ``RetryAfter``): every
        worker's next slot of its keys is after it."""
        takes = self._takes(call)
        wait = ratelimits.provider_wait(exc) if takes else None
        if wait is None or wait <= 0:
            return
        now = self._clock()
        until = now + timedelta(seconds=min(wait, conf.RUNLEDGER_RETRY_AFTER_MAX_SECONDS))
        try:
            rate_writes.rate_block(keys=[t.row for t in takes], until=until, now=now)
        except DatabaseError as exc:  # this call still waits its retry-after; others may not
            log.warning("run %s: could not block %s (%s)", self.run_id, takes[0].key, exc)
            return
        log.warning(
            "run %s: %s asked to wait %.1fs: no call of %s before %s, on any worker",
            self.run_id,
            call.tool,
            wait,
            ", ".join(t.key for t in takes),
            until.isoformat(),
            extra={"step_id": call.step_id},
        )

    # --- retries ----------------------------------------------------------------------------

    def _failure(
        self,
        call: Call,
        exc: BaseException,
        attempt: int,
        left: int,
        bad_arguments: bool,
        error: str,
    ) -> tuple[dict[str, Any], float | None]:
        """The ``Step.errors`` entry of a failed attempt, and the wait before the next one
        (None: the step fails now). Logged with the run, step and attempt."""
        now = self._clock()
        policy = call.policy or RetryPolicy(retries=call.retries)
        record = failures.entry(
            exc,
            attempt=attempt,
            at=now.isoformat(),
            error=error,
            limit=conf.RUNLEDGER_MAX_TRACEBACK_CHARS,
        )
        wait: float | None = None
        if not policy.retryable(exc, bad_arguments=bad_arguments):
            why = "the call's arguments do not fit the tool" if bad_arguments else "not retryable"
            record.update(final=True, why=why)
        elif left <= 0:
            record.update(final=True, why=f"no retries left (the tool allows {policy.retries})")
        else:
            reported = ratelimits.provider_wait(exc, now=now)  # a 429's header too
            if reported is not None:
                wait = min(reported, conf.RUNLEDGER_RETRY_AFTER_MAX_SECONDS)
            else:
                wait = policy.wait(policy.retries - left + 1, self._rand)
            record.update(
                retry_at=(now + timedelta(seconds=wait)).isoformat(), retries_left=left - 1
            )
            if reported is not None:
                record["retry_after"] = reported
        plan = f"retrying in {wait:.3f}s" if wait is not None else f"giving up: {record['why']}"
        log.warning(
            "run %s: step %r failed on attempt %d: %s; %s",
            self.run_id,
            call.step_id,
            attempt,
            error.splitlines()[0][:500] if error else record["type"],
            plan,
            extra={
                "step_id": call.step_id,
                "attempt": attempt,
                "error_type": record["type"],
                "traceback": record["traceback"],
            },
        )
        return record, wait

    def _wait_pending(self, call: Call, row: StepRow) -> StepGen:
        """A failed row whose retry is not due yet (the run was woken early): wait the rest."""
        last = row.errors[-1] if row.errors else None
        if not isinstance(last, dict) or "retry_at" not in last:
            return
        try:
            due = datetime.fromisoformat(last["retry_at"])
        except (TypeError, ValueError):
            return
        wait = (due - self._clock()).total_seconds()
        if wait > 0:
            yield from self._pause(call, wait, row.attempt + 1)

    def _pause(self, call: Call, wait: float, attempt: int) -> StepGen:
        """Wait before attempt ``attempt``: asleep holding the lease (the heartbeat renews it)
        when short; otherwise ``RetryLater`` ends the execution and releases the run."""
        if wait <= conf.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS:
            if wait > 0:
                yield _Wait(wait, backoff=True)
            return
        raise RetryLater(
            call.step_id,
            wait,
            f"attempt {attempt} of {call.tool!r} is due in {wait:.1f}s; the run waits released",
        )

    def _wait_out_previous_holder(self, step_id: str) -> StepGen:
        """Before touching an effect a previous execution attempted (``ledger.engine.fence``)."""
        left = self._fence.previous_holder_left(step_id)
        if left > 0:
            yield _Wait(left, backoff=False)

    def _gate(
        self, call: Call, row: StepRow | None, *, seq: int, prev: str | None, abandon: list[str]
    ) -> int:
        """The approved gate the intent will use; a rejection (``on_reject="raise"``) is
        recorded as the step's failed row (once) before the agent sees ``ApprovalRejected``."""
        try:
            return gate.decision(call, run_id=self.run_id, now=self._clock())
        except ApprovalRejected as exc:
            if row is None:
                write = self._write(call, seq=seq, attempt=1, key=None, errors=[])
                write.prev_step_id, write.abandon = prev, abandon
                write.status, write.error, write.finished = StepStatus.FAILED, str(exc), True
                self._commit(call.step_id, "failure", partial(transitions.step_write, write))
                self._remember(call, write, None, None, [], prev=prev, status=StepStatus.FAILED)
            raise

    def _intent_under_gate(self, call: Call, write: StepWrite, gate_id: int) -> int:
        """The effect's intent and the use of its approval: one transaction, or neither.

        The intent first: its fenced write takes the run row (FOR SHARE) before ``gate_use``
        takes the gate's, the order of every other writer (an approver locks the run, then the
        gate). The other way round, an approval asked while the worker sat between the two
        deadlocked with it, and PostgreSQL broke the deadlock by failing the approval (a 503)."""
        with transaction.atomic():
            pk: int = transitions.step_write(write)
            if not transitions.gate_use(gate_id=gate_id, digest=call.input_hash, now=write.now):
                raise gate.required(call, why="; the approval was used or withdrawn meanwhile")
        faultpoints.point("gate.after_use")  # approval used, intent committed, nothing sent
        return pk

    def _write(
        self, call: Call, *, seq: int, attempt: int, key: str | None, errors: list[Any]
    ) -> StepWrite:
        stored, truncated = stored_inputs(call.inputs_text, self._max_input_bytes)
        return StepWrite(
            run_id=self.run_id,
            token=self._token,
            step_id=call.step_id,
            status=StepStatus.SUCCEEDED,
            kind=call.kind,
            tool=call.tool,
            seq=seq,
            input_hash=call.input_hash,
            inputs_json=stored,
            inputs_truncated=truncated,
            attempt=attempt,
            now=self._clock(),
            effect_key=key,
            errors_json=canonical.dumps(errors) if errors else "[]",
            model_id=call.model_id,
            prompt_hash=call.prompt_hash,
            next_step_id=call.next_step_id,
        )

    def _replayed(self, call: Call) -> None:
        """Report a step answered from the ledger (a trace marks it on its execution)."""
        if observe.watched():
            observe.emit(
                "step_replayed", run_id=self.run_id, step_id=call.step_id, kind=str(call.kind)
            )

    def _step_finished(
        self, call: Call, write: StepWrite, began: datetime, ended: datetime, error: str = ""
    ) -> None:
        """Report one executed attempt of a step (a trace's step span), after its write."""
        if not observe.watched():
            return
        observe.emit(
            "step_executed",
            run_id=self.run_id,
            step_id=call.step_id,
            kind=str(call.kind),
            tool=call.tool,
            attempt=write.attempt,
            status="failed" if error else "succeeded",
            error=error,
            began=began,
            ended=ended,
            model_id=call.model_id,
            tokens_in=write.tokens_in,
            tokens_out=write.tokens_out,
            cost_usd=write.cost_usd,
        )

    def _finished(self, call: Call, write: StepWrite, text: str, data: Any) -> None:
        """The step succeeded with the result ``text`` (``data``): its row as it is to be
        stored, a model step's with the tokens its answer reports and their cost."""
        now = self._clock()
        write.status, write.result_json, write.finished = StepStatus.SUCCEEDED, text, True
        if call.kind == StepKind.MODEL:
            write.tokens_in, write.tokens_out = usage.tokens_of(data)
            cost = usage.cost_of(
                call.model_id,
                write.tokens_in,
                write.tokens_out,
                usage.price_table(conf.RUNLEDGER_MODEL_PRICES),
            )
            write.cost_usd = str(cost) if cost is not None else None
        write.now = now
        write.expires_at = now + timedelta(seconds=call.ttl_seconds) if call.ttl_seconds else None

    def _wait_in_batch(self, write: StepWrite) -> None:
        """Batched durability: the finished row of a read, model or clock step waits with the
        others (``ledger.engine.batch``). An effect's result never waits."""
        assert self._batch is not None and write.kind != StepKind.EFFECT
        self._batch.add(write)
        if self._batch.due():
            self._flush_soon()

    def _commit_success(self, call: Call, write: StepWrite, pk: int | None) -> None:
        if pk is not None:  # an effect: its intent row gets the result
            self._commit(
                call.step_id,
                "result",
                lambda: transitions.step_update(
                    run_id=self.run_id,
                    token=self._token,
                    pk=pk,
                    status=StepStatus.SUCCEEDED,
                    now=write.now,
                    result_json=write.result_json,
                    errors_json=write.errors_json,
                    expires_at=write.expires_at,
                ),
            )
            return
        self._commit(call.step_id, "step", lambda: transitions.step_write(write))

    def _commit_failure(
        self, write: StepWrite, pk: int | None, error: str, errors: list[Any]
    ) -> None:
        errors_json = canonical.dumps(errors)
        if pk is not None:
            self._commit(
                write.step_id,
                "failure",
                lambda: transitions.step_update(
                    run_id=self.run_id,
                    token=self._token,
                    pk=pk,
                    status=StepStatus.FAILED,
                    now=self._clock(),
                    error=error,
                    errors_json=errors_json,
                ),
            )
            return
        write.status, write.error, write.errors_json, write.finished = (
            StepStatus.FAILED,
            error,
            errors_json,
            True,
        )
        self._commit(write.step_id, "failure", lambda: transitions.step_write(write))
        write.prev_step_id, write.abandon = None, ()

    def _remember(
        self,
        call: Call,
        write: StepWrite,
        data: Any,
        key: str | None,
        errors: list[Any],
        *,
        prev: str | None,
        status: StepStatus = StepStatus.SUCCEEDED,
    ) -> None:
        """Keep the in-memory ledger equal to the table after a write."""
        ledger = self.walk.ledger
        with self.walk.lock:
            if prev is not None and prev in ledger:
                ledger[prev].next_step_id = call.step_id
            existing = ledger.get(call.step_id)
            ledger[call.step_id] = StepRow(
                pk=existing.pk if existing else 0,
                step_id=call.step_id,
                input_hash=call.input_hash,
                status=status,
                result=data,
                next_step_id=call.next_step_id or (existing.next_step_id if existing else None),
                attempt=write.attempt,
                effect_key=key,
                kind=call.kind,
                tool=call.tool,
                seq=write.seq,
                errors=list(errors),
                size=len(text.encode()) if (text := write.result_json) is not None else None,
            )

    def _effect_key(self, call: Call) -> str:
        # Unique per run and step, readable, and stable once written: it is stored with the
        # intent before the tool sees it, and every later attempt reuses the stored key.
        return f"{self.run_id}:{call.step_id}"

    # --- fan-out ---------------------------------------------------------------------------

    def fanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]:
        """Run siblings (in chain order) and return their results by step id.

        On the calling thread, before anything runs: the path check of every sibling, the
        history bound, stale refusal (nothing runs when a sibling is stale, as for one step),
        replay of the finished siblings, seq numbers and links. Then the rest run at once.
        """
        jobs, results, ids = self._fanout_jobs(calls)
        results.update(self._run_jobs(jobs, max_workers))
        self.walk.advance(*ids)
        return results

    async def afanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]:
        """The same for an async agent: the preparation on a ledger thread, then at most
        ``max_workers`` siblings at once as tasks on the loop, each an ordinary async step."""
        jobs, results, ids = await aio.ledger_phase(self._fanout_jobs, calls)
        results.update(self._collect(jobs, await self._gathered(jobs, max_workers)))
        self.walk.advance(*ids)
        return results

    async def _gathered(
        self, jobs: list[_Job], max_workers: int
    ) -> list[tuple[Any, BaseException | None]]:
        limit = asyncio.Semaphore(max_workers)
        stopped = False

        async def sibling(job: _Job) -> tuple[Any, BaseException | None]:
            nonlocal stopped
            async with limit:
                if stopped:
                    return None, _NotRun()
                try:
                    run = self._run(job.call, job.row, prev=job.prev, abandon=job.abandon)
                    return await self._adrive(run), None
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:
                    # A lost lease or a dying process: start no more siblings (as on threads).
                    dying = isinstance(exc, LeaseLost) or not isinstance(exc, Exception)
                    stopped = stopped or dying
                    return None, exc

        return list(await asyncio.gather(*(sibling(job) for job in jobs)))

    def _fanout_jobs(self, calls: list[Call]) -> tuple[list[_Job], dict[str, Any], list[str]]:
        """The calling side of a fan-out: the siblings that need work, the replayed results,
        and the siblings' step ids in chain order."""
        walk = self.walk
        if calls:
            self._holds.check_whole(calls[0].step_id)
        self.flush()  # the siblings commit from their own connections, after the steps ahead
        entry = walk.prev
        ids = [c.step_id for c in calls]
        abandon = [s for s in walk.check_fanout_path(ids) if s not in set(ids)]
        fresh = [step_id for step_id in ids if step_id not in walk.ledger]
        if fresh:
            self._check_history(len(fresh), fresh[0])
        results: dict[str, Any] = {}
        jobs: list[_Job] = []
        now = self._clock()
        for i, call in enumerate(calls):
            call.next_step_id = calls[i + 1].step_id if i + 1 < len(calls) else None
            row = walk.live_row(call.step_id)
            action = decide(kind=call.kind, input_hash=call.input_hash, row=row, now=now)
            if action == Action.STALE and row is not None and row.status == StepStatus.SUCCEEDED:
                raise StaleCheckpoint(call.step_id, _stale_detail(call, row))
            if action == Action.REPLAY:
                assert row is not None
                results[call.step_id] = row.result
                walk.count(replayed=1)
                self._replayed(call)
                continue
            if row is None:
                call.seq = walk.take_seq()
            # Each sibling's row carries the link to the next, so links never depend on which
            # thread commits first; a sibling writes the link into it only where the recorded
            # one differs (the step before the fan-out, or a path a replan changed).
            prev = entry if i == 0 else calls[i - 1].step_id
            jobs.append(_Job(call, row, prev if self._relink(prev, call) else None, abandon))
        if jobs and drain.requested():
            raise HandedBack(jobs[0].call.step_id)
        return jobs, results, ids

    def _relink(self, prev: str | None, call: Call) -> bool:
        row = self.walk.ledger.get(prev) if prev is not None else None
        return row is not None and row.next_step_id != call.step_id

    def _run_jobs(self, jobs: list[_Job], max_workers: int) -> dict[str, Any]:
        if not jobs:
            return {}
        if len(jobs) == 1 or max_workers == 1 or not _threads_possible():
            outcomes = self._serial(jobs)
        else:
            outcomes = self._threaded(jobs, max_workers)
        return self._collect(jobs, outcomes)

    def _collect(
        self, jobs: list[_Job], outcomes: list[tuple[Any, BaseException | None]]
    ) -> dict[str, Any]:
        """The siblings' results by step id; the fan-out's error when any failed."""
        results: dict[str, Any] = {}
        errors: list[BaseException] = []
        for job, (value, error) in zip(jobs, outcomes, strict=True):
            if error is None:
                results[job.call.step_id] = value
            else:
                errors.append(error)
        if errors:
            raise _first_error(self.run_id, errors)
        return results

    def _serial(self, jobs: list[_Job]) -> list[tuple[Any, BaseException | None]]:
        """One after another on the calling thread; a sibling's error does not stop the rest
        (its outcome is in its row), a lost lease does (nothing more could be committed)."""
        outcomes: list[tuple[Any, BaseException | None]] = []
        for job in jobs:
            if outcomes and isinstance(outcomes[-1][1], LeaseLost | _NotRun):
                outcomes.append((None, _NotRun()))
                continue
            try:
                run = self._run(job.call, job.row, prev=job.prev, abandon=job.abandon)
                outcomes.append((self._drive(run), None))
            except Exception as exc:
                outcomes.append((None, exc))
        return outcomes

    def _threaded(
        self, jobs: list[_Job], max_workers: int
    ) -> list[tuple[Any, BaseException | None]]:
        pool = ThreadPoolExecutor(
            max_workers=min(max_workers, len(jobs)), thread_name_prefix=f"fanout-{self.run_id}"
        )
        with pool:
            futures = [pool.submit(self._on_thread, job) for job in jobs]
            for done in as_completed(futures):
                failure = None if done.cancelled() else done.exception()
                if isinstance(failure, LeaseLost) or (
                    failure is not None and not isinstance(failure, Exception)
                ):
                    # The lease is gone (nothing more could commit) or the process is going
                    # down (a BaseException): start no more siblings.
                    for future in futures:
                        future.cancel()
        return [_outcome(future) for future in futures]

    def _on_thread(self, job: _Job) -> Any:
        try:
            return self._drive(self._run(job.call, job.row, prev=job.prev, abandon=job.abandon))
        finally:
            connections.close_all()  # this thread's own connection; the pool's threads end


def _advance(
    gen: StepGen, value: Any, error: BaseException | None
) -> tuple[bool, Request | None, Any]:
    """One advance of a step's generator: (finished, its next request, its result)."""
    try:
        request = gen.send(value) if error is None else gen.throw(error)
    except StopIteration as stop:
        return True, None, stop.value
    return False, request, None


@contextlib.contextmanager
def _ledger_write(step_id: str, what: str) -> Iterator[None]:
    """A database error in a ledger write becomes ``LedgerUnavailable``, which the agent's
    own ``except Exception`` cannot catch: whether the write committed is unknown, so nothing
    may go on as if it had (or had not) — above all, no effect may be sent."""
    try:
        with pooling.step_connection():  # written: the connection goes back to the pool
            yield
    except DatabaseError as exc:
        raise LedgerUnavailable(step_id, what, exc) from exc


def _direct(clock: Clock) -> Clock:
    """Django's ``timezone.now`` without its settings lookup on every call (two a step):
    ``datetime.now`` in UTC when USE_TZ, as ``timezone.now`` does. Any other clock (a
    test's) is used as it is."""
    if clock is not timezone.now:
        return clock
    return partial(datetime.now, UTC) if settings.USE_TZ else datetime.now


def _due(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _wait_detail(spec: Any, due: datetime | None) -> str:
    at = f"{due:%Y-%m-%d %H:%M:%S} UTC" if due is not None else ""
    if spec.event is None:
        return f"sleeping until {at}"
    return f"waiting for event {spec.event!r}" + (f" until {at}" if at else "")


def _retries_left(call: Call, row: StepRow | None) -> int:
    """The retries this execution may make: what the last failure left when its retry is
    pending (a retry after a released wait, or after a crash mid-wait, goes on counting), else
    the policy's whole number (a first execution, or a person's retry of a failed step)."""
    last = row.errors[-1] if row is not None and row.errors else None
    if (
        row is not None
        and row.status == StepStatus.FAILED
        and isinstance(last, dict)
        and "retry_at" in last
    ):
        return int(last.get("retries_left", 0))
    return call.retries


def _stale_detail(call: Call, row: StepRow) -> str:
    template = _STALE_WHY.get(StepStatus(row.status), _STALE_WHY[StepStatus.SUCCEEDED])
    return template.format(
        stored=row.input_hash[:12], today=call.input_hash[:12], key=row.effect_key
    )


def _answer_name(answer: Any) -> str:
    """A reconcile answer as a metric label: the effect happened, did not, or nobody knows."""
    if answer is None:
        return "unknown"
    return "not_happened" if answer is NOT_HAPPENED else "happened"


def _threads_possible() -> bool:
    """Siblings get their own connections, which an in-memory SQLite database (the SQLite test
    database) cannot share: there they run one after another on the calling thread."""
    in_memory = getattr(connection, "is_in_memory_db", lambda: False)
    return not (connection.vendor == "sqlite" and in_memory())


def _outcome(future: Future[Any]) -> tuple[Any, BaseException | None]:
    if future.cancelled():
        return None, _NotRun()
    failure = future.exception()
    return (None, failure) if failure is not None else (future.result(), None)


class _NotRun(Exception):
    """A sibling that was not started because the process was going down."""


def _first_error(run_id: str, errors: list[BaseException]) -> BaseException:
    """The error a fan-out raises: a dying process first, then a lost lease, else the first
    sibling's error in chain order (every sibling's outcome is already in its own row)."""
    for error in errors:
        if not isinstance(error, Exception):
            return error
    for error in errors:
        if isinstance(error, LeaseLost):
            return error
    real = [e for e in errors if not isinstance(e, _NotRun)]
    for other in real[1:]:
        log.warning("run %s: another sibling stopped too: %s", run_id, other)
    return real[0]
