"""What an agent function receives: the run context. Every call through it becomes a step.

The context turns the agent author's calls (``call``, ``parallel``, ``model``, ``now``,
``uuid``, ``random``) into ``Call``s with validated, hashed inputs and stable step ids, and hands
each to its ``Steps``: the live steps (``ledger.engine.live``) replay, reconcile or execute and
write the ledger; the dry replay (``ledger.processes.preview``) only compares. Both decide with
``ledger.engine.decide``.
"""

from __future__ import annotations

import functools
import random as random_module
import uuid as uuid_module
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NoReturn, Protocol

from ledger import canonical, llm
from ledger.conf import conf
from ledger.engine.calls import Call
from ledger.engine.walk import Walk
from ledger.errors import AgentDefinitionError, BudgetExhausted, ContinueAsNew, DuplicateStepId
from ledger.registry import Agent, Approval, Tool, approval_policy
from ledger.states import StepKind, StepStatus

Clock = Callable[[], datetime]
#: One sibling of ``ctx.parallel``: a registered tool and its keyword inputs.
Branch = tuple[Tool, Mapping[str, Any]]


class Steps(Protocol):
    """What becomes of the calls: executed and written (live), or only compared (preview)."""

    def step(self, call: Call) -> Any: ...

    def fanout(self, calls: list[Call], max_workers: int) -> dict[str, Any]: ...


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
            return tool.fn(**inputs)
        call = self._tool_call(step_id, tool, inputs)
        call.approval = gate
        return self._steps.step(call)

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
        calls: dict[str, Call] = {}
        pure: dict[str, Any] = {}
        for key in sorted(_branch_keys(branches)):
            tool, inputs = _branch(key, branches[key])
            if tool.kind == StepKind.PURE:
                pure[key] = tool.fn(**inputs)
            else:
                calls[key] = self._tool_call(f"{base}.{key}", tool, dict(inputs))
                calls[key].approval = tool.approval
        done = self._steps.fanout(list(calls.values()), max_workers) if calls else {}
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
        step_id = self._step_id(step, "model")
        schema, schema_hash = _schemas(tuple(tools) if tools is not None else self.agent.tools)
        inputs = {"model": model, "system": system, "prompt": prompt, "tool_schema": schema_hash}

        def execute(_key: str | None) -> Any:
            return llm.client_for(model).complete(
                model=model, prompt=prompt, system=system, tools=schema
            )

        return self._steps.step(
            self._prepare(
                step_id,
                kind=StepKind.MODEL,
                tool="model",
                inputs=inputs,
                execute=execute,
                retries=retries,
                model_id=model,
                prompt_hash=canonical.hash_text(canonical.dumps([system, prompt])),
            )
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
        step_id = self._step_id(step, "model")
        data = canonical.normalize(dict(request), step_id=step_id)
        return self._steps.step(
            self._prepare(
                step_id,
                kind=StepKind.MODEL,
                tool="model",
                inputs=data,
                execute=lambda _key: send(data),
                retries=retries,
                model_id=model,
                prompt_hash=canonical.hash_text(canonical.dumps(data)),
            )
        )

    def recorded(self, *, step: str) -> bool:
        """Whether the ledger holds a succeeded row for ``step`` (under the current scope): a
        call with that step id replays it, or is stale; it does not execute. Lets an adapter
        that must fetch an answer before it can record it (a proxy that hands upstream errors
        back unrecorded) know whether to fetch at all. Reads only."""
        row = self._walk.live_row(".".join([*self._scope, step]))
        return row is not None and row.status == StepStatus.SUCCEEDED

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
        step_id = self._step_id(step, name)
        call = self._prepare(
            step_id, kind=StepKind.CLOCK, tool=name, inputs={}, execute=lambda _k: read()
        )
        return self._steps.step(call)

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
        )

    def _step_id(self, step: str | None, name: str) -> str:
        self._counter += 1
        local = step if step is not None else f"{self._counter}.{name}"
        if not local or len(local) > 200:
            raise DuplicateStepId(f"step id {local!r} must be 1 to 200 characters")
        return ".".join([*self._scope, local])

    def _prepare(self, step_id: str, *, inputs: Any, **fields: Any) -> Call:
        data, text = canonical.canonical(inputs, step_id=step_id)
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
            input_hash=canonical.hash_text(text),
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
