"""The engine: one step of a run, exactly as the design says.

For each call from agent code the run context:

1. validates and hashes the inputs (nothing runs or is written for inputs that are not JSON);
2. replays a ``succeeded`` row whose hash matches, raises ``StaleCheckpoint`` when it does not;
3. sends a ``started`` effect to its tool's reconcile(effect_key): a result is committed as
   ``succeeded``, ``NOT_HAPPENED`` executes again with the same key, ``None`` raises
   ``NeedsReconciliation``;
4. otherwise executes: an effect commits ``started`` with its effect key, calls the tool with
   that key as its idempotency key, then commits ``succeeded`` (two commits, no I/O inside a
   transaction); a read, model call or clock read commits once, after.

The previous step's ``next_step_id`` is written in the same statement as the next step's first
write; on replay a call whose step id differs from the recorded next is a divergence, handled by
the agent's policy. Every write is fenced by the run's lease token.

``ctx.parallel`` fans independent tool calls out to threads: each sibling is an ordinary step
(its own row, its own fenced commits, on the thread's own database connection), so a crash
re-runs only the siblings without a settled row. ``ctx.continue_as_new`` ends the run and hands
its carried state to a new run (the worker commits both at once, see ``ledger.services``).
"""

from __future__ import annotations

import json
import logging
import random as random_module
import threading
import uuid as uuid_module
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import connection, connections

from ledger import canonical, llm, store
from ledger.errors import (
    BudgetExhausted,
    ContinueAsNew,
    Divergence,
    DuplicateStepId,
    LeaseLost,
    NeedsReconciliation,
    NotJSON,
    StaleCheckpoint,
    StepFailed,
)
from ledger.registry import NOT_HAPPENED, Agent, Tool
from ledger.store import StepRow, StepWrite

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: One sibling of ``ctx.parallel``: a registered tool and its keyword inputs.
Branch = tuple[Tool, Mapping[str, Any]]


@dataclass
class _Call:
    """Everything about one step call that does not depend on the ledger."""

    step_id: str
    kind: str
    tool: str
    inputs: Any
    inputs_text: str
    input_hash: str
    execute: Callable[[str | None], Any]
    reconcile: Callable[[str], Any] | None = None
    retries: int = 0
    ttl_seconds: float | None = None
    model_id: str = ""
    prompt_hash: str = ""
    seq: int | None = None  # taken up front for a fan-out sibling (on the calling thread)
    next_step_id: str | None = None  # a fan-out sibling's link to the next sibling


@dataclass
class _Job:
    """A fan-out sibling that needs work (execute, reconcile, or re-read) on a thread."""

    call: _Call
    row: StepRow | None
    prev: str | None
    abandon: list[str] = field(default_factory=list)


class RunContext:
    """What an agent function receives: every call through it becomes a ledger row."""

    def __init__(
        self,
        *,
        run_id: str,
        token: str,
        agent: Agent,
        inputs: Any,
        ledger: dict[str, StepRow],
        clock: Clock,
    ) -> None:
        self.run_id = run_id
        self.inputs = inputs
        self.agent = agent
        self._token = token
        self._ledger = ledger
        self._clock = clock
        self._counter = 0
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._prev: str | None = None
        self._next_seq = max((row.seq for row in ledger.values()), default=0) + 1
        self._walked: list[str] = []  # step ids this execution has returned, in order
        # Fan-out siblings share the counters, the seq and the in-memory ledger.
        self._lock = threading.Lock()
        self.replayed = 0
        self.executed = 0

    # --- the agent author's calls ---------------------------------------------------------

    def call(self, tool: Tool, /, *, step: str | None = None, **inputs: Any) -> Any:
        """Call a registered tool through the ledger; returns its (recorded) result."""
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call() takes a registered @tool, not {tool!r}")
        step_id = self._step_id(step, tool.name)
        if tool.kind == "pure":
            return tool.fn(**inputs)
        return self._step(self._tool_call(step_id, tool, inputs))

    def parallel(
        self, branches: Mapping[str, Branch], /, *, step: str, max_workers: int = 4
    ) -> dict[str, Any]:
        """Call independent tools concurrently; return their results by key, in given order.

        ``ctx.parallel({"a": (tool_a, {"x": 1}), "b": (tool_b, {})}, step="fetch")`` records
        the siblings as steps ``fetch.a`` and ``fetch.b`` (under the current scope). Each
        commits on its own; a resume replays the finished ones and runs only the rest. Every
        sibling is attempted even when another fails; the first error in key order is raised
        after all have finished. Siblings are chained in the sorted order of their keys, so a
        dict built in another order (from a set, say) replays identically.
        """
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        base = self._step_id(step, "parallel")
        calls: dict[str, _Call] = {}
        pure: dict[str, Any] = {}
        for key in sorted(_branch_keys(branches)):
            tool, inputs = _branch(key, branches[key])
            if tool.kind == "pure":
                pure[key] = tool.fn(**inputs)
            else:
                calls[key] = self._tool_call(f"{base}.{key}", tool, dict(inputs))
        done = self._fanout(list(calls.values()), max_workers) if calls else {}
        by_key = {**pure, **{key: done[call.step_id] for key, call in calls.items()}}
        return {key: by_key[key] for key in branches}

    def continue_as_new(self, inputs: Any) -> NoReturn:
        """End this run as succeeded and continue in a new queued run of the same agent.

        The new run starts with ``inputs`` (the state worth carrying: accumulated results,
        ``ctx.effects()``, a cursor) and an empty ledger; the old run's result is
        ``{"continued_as": <new run id>}``. Both are committed in one transaction.
        """
        raise ContinueAsNew(canonical.normalize(inputs, step_id="<continue_as_new inputs>"))

    def effects(self) -> dict[str, str]:
        """The effect keys of the succeeded effects this execution has walked, by step id.

        Deterministic on replay (it covers only the path walked so far), so it may be passed
        on to ``continue_as_new`` for the next run to know which effects already happened.
        """
        rows = (self._ledger.get(step_id) for step_id in self._walked)
        return {
            r.step_id: r.effect_key
            for r in rows
            if r is not None and r.kind == "effect" and r.status == "succeeded" and r.effect_key
        }

    @property
    def history_length(self) -> int:
        """How many recorded steps this execution has walked (replayed or executed) so far.

        The same on a replay as in the first execution: the number to compare with a
        threshold before calling ``continue_as_new``.
        """
        return len(self._walked)

    def model(
        self,
        prompt: str,
        *,
        model: str,
        system: str = "",
        tools: list[Tool] | tuple[Tool, ...] | None = None,
        step: str | None = None,
        retries: int = 2,
    ) -> Any:
        """A model call: inputs hashed, output stored, never re-derived on replay."""
        step_id = self._step_id(step, "model")
        schema = [t.schema() for t in (tools if tools is not None else self.agent.tools)]
        schema_hash = canonical.hash_text(canonical.dumps(canonical.normalize(schema)))
        inputs = {"model": model, "system": system, "prompt": prompt, "tool_schema": schema_hash}

        def execute(_key: str | None) -> Any:
            return llm.client_for(model).complete(
                model=model, prompt=prompt, system=system, tools=schema
            )

        return self._step(
            self._prepare(
                step_id,
                kind="model",
                tool="model",
                inputs=inputs,
                execute=execute,
                retries=retries,
                model_id=model,
                prompt_hash=canonical.hash_text(canonical.dumps([system, prompt])),
            )
        )

    def now(self, *, step: str | None = None) -> datetime:
        """The wall clock, recorded: a replay returns the first reading."""
        step_id = self._step_id(step, "now")
        value = self._step(
            self._prepare(
                step_id,
                kind="clock",
                tool="now",
                inputs={},
                execute=lambda _k: self._clock().isoformat(),
            )
        )
        return datetime.fromisoformat(value)

    def uuid(self, *, step: str | None = None) -> str:
        step_id = self._step_id(step, "uuid")
        return str(
            self._step(
                self._prepare(
                    step_id,
                    kind="clock",
                    tool="uuid",
                    inputs={},
                    execute=lambda _k: str(uuid_module.uuid4()),
                )
            )
        )

    def random(self, *, step: str | None = None) -> float:
        step_id = self._step_id(step, "random")
        return float(
            self._step(
                self._prepare(
                    step_id,
                    kind="clock",
                    tool="random",
                    inputs={},
                    execute=lambda _k: random_module.SystemRandom().random(),
                )
            )
        )

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the step ids of the calls inside: ``with ctx.scope("plan.3"): ...``."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    # --- the engine -----------------------------------------------------------------------

    def _tool_call(self, step_id: str, tool: Tool, inputs: dict[str, Any]) -> _Call:
        def execute(key: str | None) -> Any:
            if tool.kind == "effect":
                return tool.fn(**inputs, idempotency_key=key)
            return tool.fn(**inputs)

        return self._prepare(
            step_id,
            kind=tool.kind,
            tool=tool.name,
            inputs=inputs,
            execute=execute,
            reconcile=tool.reconcile,
            retries=tool.retries,
            ttl_seconds=tool.ttl_seconds,
        )

    def _step_id(self, step: str | None, name: str) -> str:
        self._counter += 1
        local = step if step is not None else f"{self._counter}.{name}"
        if not local or len(local) > 200:
            raise DuplicateStepId(f"step id {local!r} must be 1 to 200 characters")
        return ".".join([*self._scope, local])

    def _prepare(self, step_id: str, *, inputs: Any, **fields: Any) -> _Call:
        data, text = canonical.canonical(inputs, step_id=step_id)
        if step_id in self._used:
            raise DuplicateStepId(
                f"step id {step_id!r} is used twice in run {self.run_id}; "
                "step ids must be unique within a run"
            )
        self._used.add(step_id)
        return _Call(
            step_id=step_id,
            inputs=data,
            inputs_text=text,
            input_hash=canonical.hash_text(text),
            **fields,
        )

    def _step(self, call: _Call) -> Any:
        row = self._live_row(call.step_id)
        abandon = self._check_path(call.step_id)
        if call.step_id not in self._ledger:
            self._check_history(1, call.step_id)
        result = self._run(call, row, prev=self._prev, abandon=abandon)
        self._prev = call.step_id
        self._walked.append(call.step_id)
        return result

    def _live_row(self, step_id: str) -> StepRow | None:
        row = self._ledger.get(step_id)
        return None if row is None or row.status == "abandoned" else row

    def _run(
        self, call: _Call, row: StepRow | None, *, prev: str | None, abandon: list[str]
    ) -> Any:
        """Replay, settle or execute one step; ``prev`` is the step whose link it writes.

        Touches no per-execution state but the shared counters and the in-memory ledger
        (under the lock), so that fan-out siblings can run it on their own threads.
        """
        if self._replayable(call, row):
            assert row is not None
            self._count(replayed=1)
            return row.result
        if row is not None and row.status == "started" and call.kind == "effect":
            settled = self._reconcile(call, row)
            if settled is not NOT_HAPPENED:
                return settled
        elif self._failed_effect_happened(call, row):
            assert row is not None
            return row.result
        result = self._execute(call, row, prev=prev, abandon=abandon)
        self._count(executed=1)
        return result

    def _replayable(self, call: _Call, row: StepRow | None) -> bool:
        """A succeeded row that answers today's inputs and has not expired; stale raises."""
        if row is None or row.status != "succeeded":
            return False
        if row.input_hash != call.input_hash:
            raise StaleCheckpoint(
                call.step_id,
                f"stored input hash {row.input_hash[:12]}… differs from today's "
                f"{call.input_hash[:12]}…; the stored result answers another question",
            )
        return not self._expired(row)

    def _count(self, *, replayed: int = 0, executed: int = 0) -> None:
        with self._lock:
            self.replayed += replayed
            self.executed += executed

    def _check_history(self, new_rows: int, step_id: str) -> None:
        """Bound the ledger: past RUNLEDGER_MAX_STEPS_PER_RUN rows the run stops (budget)."""
        limit = settings.RUNLEDGER_MAX_STEPS_PER_RUN
        if len(self._ledger) + new_rows <= limit:
            return
        raise BudgetExhausted(
            step_id,
            f"history limit reached: the run has {len(self._ledger)} steps and "
            f"RUNLEDGER_MAX_STEPS_PER_RUN is {limit}; the agent should continue_as_new "
            "(carry its results into a new run) before its ledger grows this long",
        )

    # --- fan-out ---------------------------------------------------------------------------

    def _fanout(self, calls: list[_Call], max_workers: int) -> dict[str, Any]:
        """Run siblings (in chain order) and return their results by step id.

        On the calling thread, before anything runs: the path check of every sibling, the
        history bound, stale refusal (nothing runs when a sibling is stale, as for one step),
        replay of the finished siblings, seq numbers and links. Then the rest run at once.
        """
        entry = self._prev
        ids = {c.step_id for c in calls}
        abandon = [s for s in self._check_fanout_path(calls) if s not in ids]
        fresh = [c.step_id for c in calls if c.step_id not in self._ledger]
        if fresh:
            self._check_history(len(fresh), fresh[0])
        results: dict[str, Any] = {}
        jobs: list[_Job] = []
        for i, call in enumerate(calls):
            call.next_step_id = calls[i + 1].step_id if i + 1 < len(calls) else None
            row = self._live_row(call.step_id)
            if self._replayable(call, row):
                assert row is not None
                results[call.step_id] = row.result
                self._count(replayed=1)
                continue
            if row is None:
                call.seq = self._take_seq()
            # Each sibling's row carries the link to the next, so links never depend on which
            # thread commits first; a sibling writes the link into it only where the recorded
            # one differs (the step before the fan-out, or a path a replan changed).
            prev = entry if i == 0 else calls[i - 1].step_id
            jobs.append(_Job(call, row, prev if self._relink(prev, call) else None, abandon))
        results.update(self._run_jobs(jobs, max_workers))
        self._prev = calls[-1].step_id
        self._walked.extend(c.step_id for c in calls)
        return results

    def _relink(self, prev: str | None, call: _Call) -> bool:
        row = self._ledger.get(prev) if prev is not None else None
        return row is not None and row.next_step_id != call.step_id

    def _check_fanout_path(self, calls: list[_Call]) -> list[str]:
        """The recorded path must hold the siblings in chain order, as for single steps.

        When the fan-out opens the run, the recorded first row may be any sibling: the one
        that committed first need not be the first in the chain.
        """
        entry = self._prev
        ids = frozenset(c.step_id for c in calls)
        abandon: list[str] = []
        try:
            for i, call in enumerate(calls):
                accept = ids if i == 0 and entry is None else frozenset()
                abandon += self._check_path(call.step_id, accept=accept)
                self._prev = call.step_id
        finally:
            self._prev = entry
        return abandon

    def _run_jobs(self, jobs: list[_Job], max_workers: int) -> dict[str, Any]:
        if not jobs:
            return {}
        if len(jobs) == 1 or max_workers == 1 or not _threads_possible():
            outcomes = self._serial(jobs)
        else:
            outcomes = self._threaded(jobs, max_workers)
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
                outcomes.append(
                    (self._run(job.call, job.row, prev=job.prev, abandon=job.abandon), None)
                )
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
            return self._run(job.call, job.row, prev=job.prev, abandon=job.abandon)
        finally:
            connections.close_all()  # this thread's own connection; the pool's threads end

    def _expired(self, row: StepRow) -> bool:
        return row.kind == "read" and row.expires_at is not None and row.expires_at <= self._clock()

    def _check_path(self, step_id: str, accept: frozenset[str] = frozenset()) -> list[str]:
        """Compare the call with the recorded path; return the rows a replan abandons.

        ``accept``: other recorded step ids that may stand where this one is expected.
        """
        if self._prev is None:
            live = [r for r in self._ledger.values() if r.status != "abandoned"]
            expected = min(live, key=lambda r: r.seq).step_id if live else None
        else:
            prev_row = self._ledger.get(self._prev)
            expected = prev_row.next_step_id if prev_row is not None else None
        if expected is None or expected == step_id or expected in accept:
            return []
        where = f"after {self._prev!r}" if self._prev else "as the first step"
        detail = f"the recorded run went {where} to {expected!r}; today's code calls {step_id!r}"
        if self.agent.divergence == "refuse":
            raise Divergence(step_id, detail)
        log.warning("run %s: replanning: %s", self.run_id, detail)
        return self._abandon_branch(expected)

    def _abandon_branch(self, start: str) -> list[str]:
        """The non-effect rows of the diverged branch; effect rows keep their keys."""
        abandoned: list[str] = []
        seen: set[str] = set()
        current: str | None = start
        while current is not None and current not in seen:
            seen.add(current)
            row = self._ledger.get(current)
            if row is None:
                break
            if row.kind != "effect" and row.status != "abandoned":
                abandoned.append(current)
                row.status = "abandoned"
            current = row.next_step_id
        return abandoned

    def _failed_effect_happened(self, call: _Call, row: StepRow | None) -> bool:
        """A failed effect is asked about before it is sent again: its last attempt may have
        reached the downstream system before the error (a timeout after the charge)."""
        if row is None or row.status != "failed" or call.kind != "effect" or not row.effect_key:
            return False
        if row.input_hash != call.input_hash:
            # Its last attempt may have reached the downstream system with the old inputs;
            # sending new ones under the same key would record the old answer as theirs.
            raise StaleCheckpoint(
                call.step_id,
                f"this effect was attempted under key {row.effect_key} with other inputs; "
                "settle it before it is sent with today's",
            )
        if not call.reconcile:
            return False
        answer = call.reconcile(row.effect_key)
        if answer is None or answer is NOT_HAPPENED:
            return False  # send again under the same key, as the tool's retry policy allows
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON:
            return False
        self._settle(row, data, text)
        return True

    def _reconcile(self, call: _Call, row: StepRow) -> Any:
        """A started effect: ask the downstream system through the effect key."""
        assert row.effect_key is not None
        if row.input_hash != call.input_hash:
            raise StaleCheckpoint(
                call.step_id,
                "this effect was started with other inputs; settle it before the run goes on",
            )
        if call.reconcile is None:
            raise NeedsReconciliation(
                call.step_id,
                f"effect {call.tool!r} was started under key {row.effect_key} and the crash "
                "left its outcome unknown; the tool has no read path to ask",
            )
        answer = call.reconcile(row.effect_key)
        if answer is None:
            raise NeedsReconciliation(
                call.step_id,
                f"{call.tool!r} could not say whether key {row.effect_key} took effect",
            )
        if answer is NOT_HAPPENED:
            log.info("run %s: %s did not happen; executing with the same key", self.run_id, row)
            return NOT_HAPPENED
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON as exc:
            raise NeedsReconciliation(call.step_id, f"reconcile answered non-JSON: {exc}") from exc
        self._settle(row, data, text)
        return data

    def _settle(self, row: StepRow, data: Any, text: str) -> None:
        """Commit the downstream system's answer as the effect's result (one fenced write)."""
        store.update_step(
            run_id=self.run_id,
            token=self._token,
            pk=row.pk,
            status="succeeded",
            now=self._clock(),
            result_json=text,
            errors_json=canonical.dumps(row.errors),
        )
        row.status, row.result = "succeeded", data

    def _execute(
        self, call: _Call, row: StepRow | None, *, prev: str | None, abandon: list[str]
    ) -> Any:
        attempt = row.attempt + 1 if row is not None else 1
        seq = row.seq if row is not None else call.seq or self._take_seq()
        errors = list(row.errors) if row is not None else []
        key = None
        if call.kind == "effect":
            key = row.effect_key if row is not None and row.effect_key else self._effect_key(call)
        first_write = True
        while True:
            write = self._write(call, seq=seq, attempt=attempt, key=key, errors=errors)
            if first_write:
                write.prev_step_id, write.abandon = prev, abandon
            if call.kind == "effect":
                write.status = "started"
                pk = store.write_step(write)
                first_write = False
            try:
                outcome = call.execute(key)
                data, text = canonical.canonical(outcome, step_id=call.step_id)
            except NotJSON as exc:
                if call.kind == "effect":
                    raise NeedsReconciliation(
                        call.step_id,
                        _storable(f"the effect ran but returned a result that is not JSON: {exc}"),
                    ) from exc
                error = _storable(str(exc))  # the path may hold the odd key itself
            except Exception as exc:
                error = _describe(exc)
            else:
                self._commit_success(call, write, pk if call.kind == "effect" else None, data, text)
                self._remember(call, write, data, key, prev=prev)
                return data
            errors.append(
                {"attempt": attempt, "error": error[:2000], "at": self._clock().isoformat()}
            )
            self._commit_failure(call, write, pk if call.kind == "effect" else None, error, errors)
            first_write = False
            if attempt > call.retries + (row.attempt if row is not None else 0):
                self._remember(call, write, None, key, prev=prev, status="failed")
                raise StepFailed(call.step_id, attempt, error)
            attempt += 1

    def _write(
        self, call: _Call, *, seq: int, attempt: int, key: str | None, errors: list[Any]
    ) -> StepWrite:
        stored, truncated = _stored_inputs(call.inputs_text)
        return StepWrite(
            run_id=self.run_id,
            token=self._token,
            step_id=call.step_id,
            status="succeeded",
            kind=call.kind,
            tool=call.tool,
            seq=seq,
            input_hash=call.input_hash,
            inputs_json=stored,
            inputs_truncated=truncated,
            attempt=attempt,
            now=self._clock(),
            effect_key=key,
            errors_json=canonical.dumps(errors),
            model_id=call.model_id,
            prompt_hash=call.prompt_hash,
            next_step_id=call.next_step_id,
        )

    def _commit_success(
        self, call: _Call, write: StepWrite, pk: int | None, data: Any, text: str
    ) -> None:
        now = self._clock()
        expires = now + timedelta(seconds=call.ttl_seconds) if call.ttl_seconds else None
        if pk is not None:
            store.update_step(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                status="succeeded",
                now=now,
                result_json=text,
                errors_json=write.errors_json,
                expires_at=expires,
            )
            return
        write.status, write.result_json, write.finished = "succeeded", text, True
        write.now, write.expires_at = now, expires
        store.write_step(write)

    def _commit_failure(
        self, call: _Call, write: StepWrite, pk: int | None, error: str, errors: list[Any]
    ) -> None:
        errors_json = canonical.dumps(errors)
        if pk is not None:
            store.update_step(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                status="failed",
                now=self._clock(),
                error=error,
                errors_json=errors_json,
            )
            return
        write.status, write.error, write.errors_json, write.finished = (
            "failed",
            error,
            errors_json,
            True,
        )
        store.write_step(write)
        write.prev_step_id, write.abandon = None, ()

    def _remember(
        self,
        call: _Call,
        write: StepWrite,
        data: Any,
        key: str | None,
        *,
        prev: str | None,
        status: str = "succeeded",
    ) -> None:
        """Keep the in-memory ledger equal to the table after a write."""
        with self._lock:
            if prev is not None and prev in self._ledger:
                self._ledger[prev].next_step_id = call.step_id
            existing = self._ledger.get(call.step_id)
            self._ledger[call.step_id] = StepRow(
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
                errors=json.loads(write.errors_json),
            )

    def _take_seq(self) -> int:
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            return seq

    def _effect_key(self, call: _Call) -> str:
        # Unique per run and step, readable, and stable once written: it is stored with the
        # intent before the tool sees it, and every later attempt reuses the stored key.
        return f"{self.run_id}:{call.step_id}"


_ERROR_LIMIT = 10_000


def _describe(exc: BaseException) -> str:
    """An exception as text the ledger can always store: a tool's error may be huge, hold NUL
    bytes or lone surrogates (rejected by PostgreSQL), or have a ``__str__`` that raises."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__}: <the exception's text could not be read>"
    return _storable(text)


def _storable(text: str) -> str:
    text = text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > _ERROR_LIMIT:
        text = f"{text[:_ERROR_LIMIT]}… [{len(text)} characters, cut]"
    return text


def _branch_keys(branches: Mapping[str, Branch]) -> list[str]:
    keys = list(branches)
    for key in keys:
        if not isinstance(key, str) or not key or len(key) > 100:
            raise DuplicateStepId(
                f"a parallel branch key must be a string of 1 to 100 characters, not {key!r}"
            )
    return keys


def _branch(key: str, branch: Any) -> tuple[Tool, Mapping[str, Any]]:
    if (
        not isinstance(branch, tuple)
        or len(branch) != 2
        or not isinstance(branch[0], Tool)
        or not isinstance(branch[1], Mapping)
    ):
        raise TypeError(f"ctx.parallel() branch {key!r} must be (tool, {{inputs}}), not {branch!r}")
    return branch[0], branch[1]


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


def _stored_inputs(text: str) -> tuple[str | None, bool]:
    limit = settings.RUNLEDGER_MAX_STORED_INPUT_BYTES
    if len(text.encode("utf-8")) <= limit:
        return text, False
    preview = text.encode("utf-8")[: max(limit - 200, 0)].decode("utf-8", "ignore")
    return canonical.dumps(
        {"truncated": True, "bytes": len(text.encode()), "preview": preview}
    ), True


__all__ = ["Clock", "RunContext"]
