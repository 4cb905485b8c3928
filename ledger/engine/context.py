"""What an agent function receives: the run context. Every call through it becomes a step.

The context turns the agent author's calls (``call``, ``parallel``, ``model``, ``now``,
``uuid``, ``random``) into ``Call``s with validated, hashed inputs and stable step ids, and hands
each to its ``Steps``: the live steps (``ledger.engine.live``) replay, reconcile or execute and
write the ledger; the dry replay (``ledger.processes.preview``) only compares. Both decide with
``ledger.engine.decide``.
"""

from __future__ import annotations

import functools
import inspect
import random as random_module
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol

from ledger import canonical, live, llm
from ledger.conf import conf
from ledger.engine.calls import Call, WaitSpec
from ledger.engine.walk import Walk
from ledger.errors import (
    AgentDefinitionError,
    BudgetExhausted,
    ContinueAsNew,
    DuplicateStepId,
    NotAwaited,
)
from ledger.registry import Agent, Approval, Tool, approval_policy, is_async
from ledger.states import StepKind, StepStatus

Clock = Callable[[], datetime]
#: The most data one ``ctx.emit`` carries (canonical JSON, UTF-8 bytes).
MAX_EVENT_BYTES = 65_536
#: One sibling of ``ctx.parallel``: a registered tool and its keyword inputs.
Branch = tuple[Tool, Mapping[str, Any]]


class Steps(Protocol):
    """What becomes of the calls: executed and written (live), or only compared (preview)."""

    def step(self, call: Call) -> Any: ...

    def fanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]: ...

    def astep(self, call: Call) -> Awaitable[Any]: ...

    def afanout(self, calls: list[Call], max_workers: int) -> Awaitable[dict[str, Any]]: ...


class RunContext:
    """What an agent function receives: every call through it becomes a ledger row."""

    def __init__(
        self,
        *,
        walk: Walk,
        steps: Steps,
        inputs: Any,
        clock: Clock,
        fencing_token: int | None = None,
    ) -> None:
        self.run_id = walk.run_id
        self.agent: Agent = walk.agent
        self.inputs = inputs
        #: This execution's fencing token (the run's claim counter; None in a dry replay).
        self.fencing_token = fencing_token
        self._walk = walk
        self._steps = steps
        self._clock = clock
        self._counter = 0
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._sized = 0  # how many walked steps history_bytes has counted
        self._max_bytes = conf.RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN
        self._bytes = 0

    @property
    def lease_token(self) -> str | None:
        """This execution's lease token (None in a dry replay): an adapter that keeps rows of
        its own beside the ledger (LangGraph's checkpoints) fences their writes with it, as the
        engine fences its steps."""
        token = getattr(self._steps, "lease_token", None)
        return token if isinstance(token, str) else None

    @property
    def replayed(self) -> int:
        return self._walk.replayed

    @property
    def executed(self) -> int:
        return self._walk.executed

    # --- the agent author's calls ---------------------------------------------------------

    def call(
        self,
        tool: Tool,
        /,
        *,
        step: str | None = None,
        approval: Approval | bool | None = None,
        **inputs: Any,
    ) -> Any:
        """Call a registered tool through the ledger; returns its (recorded) result.

        ``approval`` (effects): this call waits for a person's approval of its exact arguments
        before it is sent, as ``@tool(approval=...)`` does for every call (``True`` or an
        ``Approval``; ``None`` keeps the tool's own; ``False`` is refused for a gated tool).
        """
        if isinstance(tool, Tool) and tool.is_async:
            raise NotAwaited(
                f"tool {tool.name!r} is an async def: a sync agent cannot call it; make the "
                "agent an async def and write `await ctx.call(...)`, or the tool a def"
            )
        call = self._call_step(tool, step, approval, inputs)
        return tool.fn(**inputs) if call is None else self._steps.step(call)

    def _call_step(
        self,
        tool: Tool,
        step: str | None,
        approval: Approval | bool | None,
        inputs: dict[str, Any],
    ) -> Call | None:
        """The step of ``ctx.call``; None for a pure tool (recomputed, not recorded)."""
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call() takes a registered @tool, not {tool!r}")
        gate = tool.approval
        if approval is not None:
            if approval is False and gate is not None:
                raise AgentDefinitionError(
                    f"tool {tool.name!r} requires approval; a call cannot turn it off"
                )
            gate = approval_policy(approval, kind=tool.kind, name=tool.name) or gate
        step_id = self._step_id(step, tool.name)
        if tool.kind == StepKind.PURE:
            return None
        call = self._tool_call(step_id, tool, inputs)
        call.approval = gate
        return call

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
        calls, pure = self._fanout_calls(branches, step, max_workers)
        for key, (tool, inputs) in pure.items():
            if tool.is_async:
                raise NotAwaited(f"branch {key!r}: tool {tool.name!r} is an async def")
            pure[key] = tool.fn(**inputs)
        done = self._steps.fanout(list(calls.values()), max_workers) if calls else {}
        by_key = {**pure, **{key: done[call.step_id] for key, call in calls.items()}}
        return {key: by_key[key] for key in branches}

    def _fanout_calls(
        self, branches: Mapping[str, Branch], step: str, max_workers: int
    ) -> tuple[dict[str, Call], dict[str, Any]]:
        """The siblings' calls by key (in the sorted order of their keys) and the pure ones'
        (tool, inputs), which are recomputed, not recorded."""
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        base = self._step_id(step, "parallel")
        calls: dict[str, Call] = {}
        pure: dict[str, Any] = {}
        for key in sorted(_branch_keys(branches)):
            tool, inputs = _branch(key, branches[key])
            if tool.kind == StepKind.PURE:
                pure[key] = (tool, inputs)
            else:
                calls[key] = self._tool_call(f"{base}.{key}", tool, dict(inputs))
                calls[key].approval = tool.approval
        return calls, pure

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
        rows = (self._walk.ledger.get(step_id) for step_id in self._walk.walked)
        return {
            r.step_id: r.effect_key
            for r in rows
            if r is not None
            and r.kind == StepKind.EFFECT
            and r.status == StepStatus.SUCCEEDED
            and r.effect_key
        }

    @property
    def history_length(self) -> int:
        """How many recorded steps this execution has walked (replayed or executed) so far.

        The same on a replay as in the first execution: the number to compare with a
        threshold before calling ``continue_as_new``.
        """
        return len(self._walk.walked)

    @property
    def history_bytes(self) -> int:
        """The size of the stored results (canonical JSON, UTF-8 bytes) of the steps this
        execution has walked so far. The same on a replay as in the first execution: the
        other number to compare with a threshold before calling ``continue_as_new``.
        """
        walked = self._walk.walked
        for step_id in walked[self._sized :]:
            row = self._walk.ledger.get(step_id)
            if row is not None:
                size = row.size
                self._bytes += len(canonical.dumps(row.result).encode()) if size is None else size
        self._sized = len(walked)
        return self._bytes

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
        return self._steps.step(
            self._model_call(prompt, model, system, tools, step, retries, asynchronous=False)
        )

    def _model_call(
        self,
        prompt: str,
        model: str,
        system: str,
        tools: list[Tool] | tuple[Tool, ...] | None,
        step: str | None,
        retries: int,
        *,
        asynchronous: bool,
    ) -> Call:
        """The step of ``ctx.model``: for an async agent, a client's ``acomplete`` (awaited on
        the loop) where it has one, else its ``complete`` (on a thread)."""
        step_id = self._step_id(step, "model")
        schema, schema_hash = _schemas(tuple(tools) if tools is not None else self.agent.tools)
        inputs = {"model": model, "system": system, "prompt": prompt, "tool_schema": schema_hash}

        client = llm.client_for(model) if asynchronous else None
        on_loop = client is not None and is_async(getattr(client, "acomplete", None))

        async def on_the_loop() -> Any:
            with live.executing(self.run_id, step_id):  # its text streamed to live readers
                return await client.acomplete(  # type: ignore[union-attr]
                    model=model, prompt=prompt, system=system, tools=schema
                )

        def execute(_key: str | None) -> Any:
            if on_loop:
                return on_the_loop()
            with live.executing(self.run_id, step_id):
                return (client or llm.client_for(model)).complete(
                    model=model, prompt=prompt, system=system, tools=schema
                )

        return self._prepare(
            step_id,
            kind=StepKind.MODEL,
            tool="model",
            inputs=inputs,
            execute=execute,
            retries=retries,
            model_id=model,
            prompt_hash=canonical.hash_text(canonical.dumps([system, prompt])),
            is_async=on_loop,
        )

    def model_request(
        self,
        request: Mapping[str, Any],
        *,
        send: Callable[[dict[str, Any]], Any],
        model: str,
        step: str | None = None,
        retries: int = 0,
    ) -> Any:
        """A model call given as the whole request an SDK sends (messages, tools, parameters).

        The step's input hash covers all of ``request``; ``send(request)`` runs only when the
        step has no succeeded row, and its JSON answer is stored and replayed, never re-derived.
        ``retries`` are the engine's own attempts on an error ``send`` raises (an SDK that
        retries transient errors itself needs none). Used by ``ledger.loops``.
        """
        return self._steps.step(self._request_call(request, send, model, step, retries))

    def _request_call(
        self,
        request: Mapping[str, Any],
        send: Callable[[dict[str, Any]], Any],
        model: str,
        step: str | None,
        retries: int,
    ) -> Call:
        step_id = self._step_id(step, "model")
        data = canonical.normalize(dict(request), step_id=step_id)
        return self._prepare(
            step_id,
            kind=StepKind.MODEL,
            tool="model",
            inputs=data,
            execute=lambda _key: live.bound_send(self.run_id, step_id, send)(data),
            retries=retries,
            model_id=model,
            prompt_hash=canonical.hash_text(canonical.dumps(data)),
            is_async=is_async(send),
        )

    def recorded(self, *, step: str) -> bool:
        """Whether the ledger holds a succeeded row for ``step`` (under the current scope): a
        call with that step id replays it, or is stale; it does not execute. Lets an adapter
        that must fetch an answer before it can record it (a proxy that hands upstream errors
        back unrecorded) know whether to fetch at all. Reads only."""
        row = self._walk.live_row(".".join([*self._scope, step]))
        return row is not None and row.status == StepStatus.SUCCEEDED

    def emit(self, kind: str, data: Any = None, *, step: str | None = None) -> None:
        """Append an event to the run's stream (``GET /api/v1/runs/{run_id}/stream``), once.

        The event takes a step id as a call does (``<n>.emit``, or ``step``), and is stored
        under it: a re-execution after a crash walks the same path to the same ``emit``, finds
        the event stored and appends nothing, so a client sees each event once whatever the
        number of executions. ``kind`` is 1 to 100 characters; ``data`` any JSON value of at
        most ``MAX_EVENT_BYTES`` (canonical JSON). Steps the batch still holds commit first:
        an event is never in the stream before the steps that led to it are in the ledger.
        """
        step_id, text = self._emit_step(kind, data, step)
        emit = getattr(self._steps, "emit", None)
        if emit is not None:
            emit(step_id, kind, text)

    def _emit_step(self, kind: str, data: Any, step: str | None) -> tuple[str, Any]:
        if not isinstance(kind, str) or not kind or len(kind) > 100:
            raise AgentDefinitionError(f"ctx.emit kind must be 1 to 100 characters, not {kind!r}")
        step_id = self._step_id(step, "emit")
        value = canonical.normalize(data, step_id=step_id)
        size = len(canonical.dumps(value).encode())
        if size > MAX_EVENT_BYTES:
            raise AgentDefinitionError(
                f"ctx.emit at step {step_id!r}: {size} bytes of data; at most {MAX_EVENT_BYTES}"
            )
        if step_id in self._used:
            raise DuplicateStepId(
                f"step id {step_id!r} is used twice in run {self.run_id}; "
                "step ids must be unique within a run"
            )
        self._used.add(step_id)
        return step_id, value

    @property
    def cancelled(self) -> bool:
        """Whether the run was cancelled while this execution runs (a person, the API). The
        agent may look between steps and stop early; a model call or a wait in progress ends
        at once with ``RunCancelled`` anyway, and any later write is refused."""
        return bool(getattr(self._steps, "cancelled", False))

    def now(self, *, step: str | None = None) -> datetime:
        """The wall clock, recorded: a replay returns the first reading."""
        value = self._recorded(step, "now", lambda: self._clock().isoformat())
        return datetime.fromisoformat(value)

    def uuid(self, *, step: str | None = None) -> str:
        """A random UUID4 as text, recorded: a replay returns the first one."""
        return str(self._recorded(step, "uuid", lambda: str(uuid_module.uuid4())))

    def random(self, *, step: str | None = None) -> float:
        """A float in [0, 1) from the system's randomness, recorded: a replay returns it."""
        return float(self._recorded(step, "random", lambda: random_module.SystemRandom().random()))

    def sleep(self, seconds: float, *, step: str | None = None) -> None:
        """Sleep ``seconds``, durably: the due time is recorded at the first execution, so a
        replay does not sleep again and a resume after a crash neither shortens nor repeats
        the sleep. Up to RUNLEDGER_SLEEP_HOLD_SECONDS the worker waits holding the run; a
        longer sleep releases it (no worker slot, no connection, no resume budget) until due."""
        self._steps.step(self._sleep_call(step, seconds=seconds))

    def sleep_until(self, when: datetime, *, step: str | None = None) -> None:
        """Sleep until ``when`` (a timezone-aware datetime), durably, as ``sleep`` does."""
        self._steps.step(self._sleep_call(step, until=when))

    def wait_for_event(
        self,
        name: str,
        *,
        timeout: float | None = None,
        default: Any = None,
        step: str | None = None,
    ) -> Any:
        """The payload of the next event ``name`` sent to this run (``ledger.api.send_event``,
        ``POST /api/v1/runs/{run_id}/events``), taken from its mailbox exactly once and
        recorded: a replay gets the same payload. Events sent before the run waits wait in the
        mailbox, in the order they arrived. After ``timeout`` seconds (None: no timeout) with no
        such event it returns ``default`` (None unless given): a timeout is a value, not an
        error. A wait longer than RUNLEDGER_SLEEP_HOLD_SECONDS releases the run; the event's
        arrival queues it again."""
        return _event_value(self._steps.step(self._event_call(step, name, timeout)), default)

    def ask(
        self,
        question: str,
        *,
        schema: Mapping[str, Any] | None = None,
        role: str = "operator",
        timeout: float | None = None,
        default: Any = None,
        step: str | None = None,
    ) -> Any:
        """Ask a person and return their answer (JSON, valid against the JSON Schema ``schema``
        when one is given). The run stops as needs_attention, reason ``question``, until a
        person holding ``role`` (viewer, operator, approver or admin) answers on the dashboard
        or through the API; the answer is validated, audited and recorded as this step (a
        replay returns it). After ``timeout`` seconds without an answer it returns ``default``."""
        return _event_value(
            self._steps.step(self._ask_call(step, question, schema, role, timeout)), default
        )

    def _ask_call(
        self,
        step: str | None,
        question: str,
        schema: Mapping[str, Any] | None,
        role: str,
        timeout: float | None,
    ) -> Call:
        if not isinstance(question, str) or not question.strip() or len(question) > 4000:
            raise TypeError("ctx.ask() takes a question of 1 to 4000 characters")
        if role not in ASK_ROLES:
            raise TypeError(f"ctx.ask() role is one of {', '.join(ASK_ROLES)}, not {role!r}")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise TypeError(f"timeout is a number of seconds >= 0 or None, not {timeout!r}")
        if schema is not None:
            _check_schema(schema)
        step_id = self._step_id(step, "ask")
        inputs = {"question": question, "schema": schema, "role": role, "timeout": timeout}
        call = self._prepare(
            step_id, kind=StepKind.CLOCK, tool="ask", inputs=inputs, execute=_never_executed
        )
        call.wait = WaitSpec(seconds=timeout, event=answer_event(step_id), question=question)
        return call

    def _sleep_call(
        self, step: str | None, *, seconds: float | None = None, until: datetime | None = None
    ) -> Call:
        if until is not None:
            if not isinstance(until, datetime) or until.tzinfo is None:
                raise TypeError("ctx.sleep_until() takes a timezone-aware datetime")
            until = until.astimezone(UTC)
            inputs: dict[str, Any] = {"until": until.isoformat()}
        else:
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
                raise TypeError(f"ctx.sleep() takes a number of seconds >= 0, not {seconds!r}")
            inputs = {"seconds": seconds}
        return self._wait_call(step, "sleep", inputs, WaitSpec(seconds=seconds, until=until))

    def _event_call(self, step: str | None, name: str, timeout: float | None) -> Call:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise TypeError(
                f"ctx.wait_for_event() takes a name of 1 to 200 characters, not {name!r}"
            )
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise TypeError(f"timeout is a number of seconds >= 0 or None, not {timeout!r}")
        inputs = {"name": name, "timeout": timeout}
        return self._wait_call(
            step, "wait_for_event", inputs, WaitSpec(seconds=timeout, event=name)
        )

    def _wait_call(self, step: str | None, name: str, inputs: Any, spec: WaitSpec) -> Call:
        def execute(_key: str | None) -> Any:
            raise AssertionError("a wait is recorded by the live steps, never executed")

        call = self._prepare(
            self._step_id(step, name),
            kind=StepKind.CLOCK,
            tool=name,
            inputs=inputs,
            execute=execute,
        )
        call.wait = spec
        return call

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the step ids of the calls inside: ``with ctx.scope("plan.3"): ...``."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    # --- building calls -------------------------------------------------------------------

    def _recorded(self, step: str | None, name: str, read: Callable[[], Any]) -> Any:
        return self._steps.step(self._clock_call(step, name, read))

    def _clock_call(self, step: str | None, name: str, read: Callable[[], Any]) -> Call:
        step_id = self._step_id(step, name)
        return self._prepare(
            step_id, kind=StepKind.CLOCK, tool=name, inputs={}, execute=lambda _k: read()
        )

    def _tool_call(self, step_id: str, tool: Tool, inputs: dict[str, Any]) -> Call:
        fencing = {"fencing_token": self.fencing_token}

        def execute(key: str | None) -> Any:
            if tool.kind != StepKind.EFFECT:
                return tool.fn(**inputs)
            if tool.takes_fencing_token:
                return tool.fn(**inputs, idempotency_key=key, **fencing)
            return tool.fn(**inputs, idempotency_key=key)

        reconcile = tool.reconcile
        if reconcile is not None and tool.reconcile_takes_fencing_token:
            lookup = reconcile
            if is_async(lookup):

                async def reconcile(key: str) -> Any:
                    return await lookup(key, **fencing)

            else:

                def reconcile(key: str) -> Any:
                    return lookup(key, **fencing)

        return self._prepare(
            step_id,
            kind=StepKind(tool.kind),
            tool=tool.name,
            inputs=inputs,
            execute=execute,
            reconcile=reconcile,
            retries=tool.retries,
            policy=tool.retry,
            source=tool,
            ttl_seconds=tool.ttl_seconds,
            is_async=tool.is_async,
        )

    def _step_id(self, step: str | None, name: str) -> str:
        self._counter += 1
        local = step if step is not None else f"{self._counter}.{name}"
        if not local or len(local) > 200:
            raise DuplicateStepId(f"step id {local!r} must be 1 to 200 characters")
        return ".".join([*self._scope, local])

    def _prepare(self, step_id: str, *, inputs: Any, **fields: Any) -> Call:
        data, text, digest = canonical.canonical_hashed(inputs, step_id=step_id)
        if step_id in self._used:
            raise DuplicateStepId(
                f"step id {step_id!r} is used twice in run {self.run_id}; "
                "step ids must be unique within a run"
            )
        self._used.add(step_id)
        self._check_bytes(step_id)
        return Call(
            step_id=step_id,
            inputs=data,
            inputs_text=text,
            input_hash=digest,
            **fields,
        )

    def _check_bytes(self, step_id: str) -> None:
        """Bound the history by size: a step the ledger does not hold yet is refused once the
        walked results pass RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN (the run stops, budget)."""
        limit = self._max_bytes
        if step_id in self._walk.ledger or not limit or self.history_bytes < limit:
            return
        raise BudgetExhausted(
            step_id,
            f"history limit reached: the steps walked hold {self.history_bytes} bytes of "
            f"results and RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN is {limit}; the agent should "
            "continue_as_new (carry its results into a new run) before its ledger grows this big",
        )


class AsyncRunContext(RunContext):
    """What an ``async def`` agent receives: the same calls, awaited.

    ``await ctx.call(tool, ...)``, ``await ctx.parallel(...)``, ``await ctx.model(...)``,
    ``await ctx.model_request(...)``, ``await ctx.now()``, ``await ctx.uuid()`` and
    ``await ctx.random()`` record the same steps as a sync agent's calls — the same step ids,
    input hashes and effect keys (each call takes its step id when it is made, before it is
    awaited). The rest (``scope``, ``effects``, ``history_length``, ``continue_as_new`` …) is
    the sync context's. One step at a time: a call made before the one before it was awaited
    (``asyncio.gather`` of ctx calls, or a forgotten ``await``) raises ``NotAwaited``; for
    calls at once, ``ctx.parallel``.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._open: str | None = None  # the step made and not yet awaited to its end

    def call(  # type: ignore[override]
        self,
        tool: Tool,
        /,
        *,
        step: str | None = None,
        approval: Approval | bool | None = None,
        **inputs: Any,
    ) -> Awaitable[Any]:
        """``await ctx.call(tool, **inputs)``: as ``RunContext.call``; an ``async def`` tool is
        awaited on the loop, a sync one runs on a thread."""
        self._check_awaited(f"ctx.call({getattr(tool, 'name', tool)!r})")
        call = self._call_step(tool, step, approval, inputs)
        if call is None:
            return _value_of(tool.fn, inputs)
        return self._pending(call)

    def parallel(  # type: ignore[override]
        self, branches: Mapping[str, Branch], /, *, step: str, max_workers: int = 4
    ) -> Awaitable[dict[str, Any]]:
        """``await ctx.parallel({...}, step=...)``: as ``RunContext.parallel`` (the same step
        ids), the siblings at most ``max_workers`` at once as tasks on the loop."""
        self._check_awaited(f"ctx.parallel(step={step!r})")
        calls, pure = self._fanout_calls(branches, step, max_workers)
        self._open = f"{step} (ctx.parallel)"
        return self._fanout(branches, calls, pure, max_workers)

    async def _fanout(
        self,
        branches: Mapping[str, Branch],
        calls: dict[str, Call],
        pure: dict[str, Any],
        max_workers: int,
    ) -> dict[str, Any]:
        try:
            for key, (tool, inputs) in pure.items():
                pure[key] = await _value_of(tool.fn, inputs)
            done = await self._steps.afanout(list(calls.values()), max_workers) if calls else {}
        finally:
            self._open = None
        by_key = {**pure, **{key: done[call.step_id] for key, call in calls.items()}}
        return {key: by_key[key] for key in branches}

    def model(  # type: ignore[override]
        self,
        prompt: str,
        *,
        model: str,
        system: str = "",
        tools: list[Tool] | tuple[Tool, ...] | None = None,
        step: str | None = None,
        retries: int = 2,
    ) -> Awaitable[Any]:
        """``await ctx.model(...)``: the client's ``acomplete`` on the loop where it has one."""
        self._check_awaited("ctx.model()")
        return self._pending(
            self._model_call(prompt, model, system, tools, step, retries, asynchronous=True)
        )

    def model_request(  # type: ignore[override]
        self,
        request: Mapping[str, Any],
        *,
        send: Callable[[dict[str, Any]], Any],
        model: str,
        step: str | None = None,
        retries: int = 0,
    ) -> Awaitable[Any]:
        """``await ctx.model_request(...)``: ``send`` may be an ``async def``."""
        self._check_awaited("ctx.model_request()")
        return self._pending(self._request_call(request, send, model, step, retries))

    def emit(  # type: ignore[override]
        self, kind: str, data: Any = None, *, step: str | None = None
    ) -> Awaitable[None]:
        """``await ctx.emit(kind, data)``: as ``RunContext.emit``, the write on a ledger thread."""
        self._check_awaited("ctx.emit()")
        step_id, value = self._emit_step(kind, data, step)
        aemit = getattr(self._steps, "aemit", None)
        if aemit is None:
            return _value_of(lambda: None, {})
        self._open = step_id
        return self._emitted(aemit(step_id, kind, value))

    async def _emitted(self, pending: Awaitable[None]) -> None:
        try:
            await pending
        finally:
            self._open = None

    def now(self, *, step: str | None = None) -> Awaitable[datetime]:  # type: ignore[override]
        self._check_awaited("ctx.now()")
        call = self._clock_call(step, "now", lambda: self._clock().isoformat())
        return _then(self._pending(call), datetime.fromisoformat)

    def uuid(self, *, step: str | None = None) -> Awaitable[str]:  # type: ignore[override]
        self._check_awaited("ctx.uuid()")
        call = self._clock_call(step, "uuid", lambda: str(uuid_module.uuid4()))
        return _then(self._pending(call), str)

    def random(self, *, step: str | None = None) -> Awaitable[float]:  # type: ignore[override]
        self._check_awaited("ctx.random()")
        call = self._clock_call(step, "random", lambda: random_module.SystemRandom().random())
        return _then(self._pending(call), float)

    def sleep(self, seconds: float, *, step: str | None = None) -> Awaitable[None]:  # type: ignore[override]
        """``await ctx.sleep(seconds)``: as ``RunContext.sleep``."""
        self._check_awaited("ctx.sleep()")
        return _then(self._pending(self._sleep_call(step, seconds=seconds)), _nothing)

    def sleep_until(self, when: datetime, *, step: str | None = None) -> Awaitable[None]:  # type: ignore[override]
        """``await ctx.sleep_until(when)``: as ``RunContext.sleep_until``."""
        self._check_awaited("ctx.sleep_until()")
        return _then(self._pending(self._sleep_call(step, until=when)), _nothing)

    def wait_for_event(  # type: ignore[override]
        self,
        name: str,
        *,
        timeout: float | None = None,
        default: Any = None,
        step: str | None = None,
    ) -> Awaitable[Any]:
        """``await ctx.wait_for_event(name, timeout=...)``: as ``RunContext.wait_for_event``."""
        self._check_awaited("ctx.wait_for_event()")
        call = self._event_call(step, name, timeout)
        return _then(self._pending(call), lambda taken: _event_value(taken, default))

    def ask(  # type: ignore[override]
        self,
        question: str,
        *,
        schema: Mapping[str, Any] | None = None,
        role: str = "operator",
        timeout: float | None = None,
        default: Any = None,
        step: str | None = None,
    ) -> Awaitable[Any]:
        """``await ctx.ask(question, ...)``: as ``RunContext.ask``."""
        self._check_awaited("ctx.ask()")
        call = self._ask_call(step, question, schema, role, timeout)
        return _then(self._pending(call), lambda taken: _event_value(taken, default))

    def unawaited(self) -> str | None:
        """The step made and never awaited, if any (checked when the agent returns)."""
        return self._open

    def _check_awaited(self, what: str) -> None:
        if self._open is not None:
            raise NotAwaited(
                f"{what} was made before step {self._open!r} was awaited: await each ctx call "
                "before making the next (ctx.parallel runs calls at once)"
            )

    def _pending(self, call: Call) -> Awaitable[Any]:
        self._open = call.step_id
        return self._awaited(call)

    async def _awaited(self, call: Call) -> Any:
        try:
            return await self._steps.astep(call)
        finally:
            self._open = None


async def _value_of(fn: Callable[..., Any], inputs: Mapping[str, Any]) -> Any:
    """A pure tool's value (recomputed, not recorded): awaited when it is an ``async def``."""
    value = fn(**inputs)
    return await value if inspect.isawaitable(value) else value


#: The roles ``ctx.ask`` may ask, weakest first (a stronger role may answer too).
ASK_ROLES = ("viewer", "operator", "approver", "admin")


def answer_event(step_id: str) -> str:
    """The mailbox name of the answer to the question asked at ``step_id``."""
    return f"answer:{step_id}"


def _never_executed(_key: str | None) -> Any:
    raise AssertionError("a wait is recorded by the live steps, never executed")


def _check_schema(schema: Any) -> None:
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise AgentDefinitionError(
            f"ctx.ask() schema is not a JSON Schema: {exc.message}"
        ) from None


def _nothing(_value: Any) -> None:
    return None


def _event_value(taken: Any, default: Any) -> Any:
    """What ``wait_for_event`` returns for its recorded result: the event's payload, or
    ``default`` when it timed out."""
    if isinstance(taken, dict) and "event_id" in taken:
        return taken.get("payload")
    return default


async def _then(pending: Awaitable[Any], convert: Callable[[Any], Any]) -> Any:
    return convert(await pending)


def _schemas(tools: tuple[Tool, ...]) -> tuple[list[dict[str, Any]], str]:
    try:
        return _tool_schema(tools)
    except TypeError:  # a tool holding something unhashable (a callable object): not cached
        return _tool_schema.__wrapped__(tools)


@functools.lru_cache(maxsize=256)
def _tool_schema(tools: tuple[Tool, ...]) -> tuple[list[dict[str, Any]], str]:
    """The schemas of ``tools`` as a model sees them, and their hash, computed once per tool
    set: building them reads every tool's signature and type hints (~0.2 ms for two tools, two
    thirds of a model step's own CPU). A ``Tool`` is frozen, so equal tools have equal schemas.
    The list is shared by every call with these tools: a model client reads it, never changes it.
    """
    schema = [t.schema() for t in tools]
    return schema, canonical.hash_text(canonical.dumps(canonical.normalize(schema)))


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
