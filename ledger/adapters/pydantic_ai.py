"""Durable PydanticAI agents (optional extra: ``runledger[pydantic-ai]``).

    from pydantic_ai import Agent, RunContext
    from ledger.adapters.pydantic_ai import effect_key, run_agent

    desk = Agent("openai:gpt-5", deps_type=Payments, instructions="You settle refunds.")

    @desk.tool
    def refund(ctx: RunContext[Payments], customer: str, amount_cents: int) -> dict:
        return ctx.deps.refund(customer, amount_cents, key=effect_key())

    @agent("refund-pai")
    def refund_pai(ctx, inputs):
        return run_agent(ctx, desk, inputs["message"], deps=Payments(),
                         effects={"refund": find_refund})

The extension points are PydanticAI's own, as its durable-execution integrations use them: the
agent runs with a wrapped model (``LedgerModel``, a ``WrapperModel``) and a capability whose
wrapper toolset (``LedgerToolset``, a ``WrapperToolset`` from ``get_wrapper_toolset``) stands
around every toolset of the run — ``@agent.tool``, ``@agent.tool_plain``, toolsets, MCP
servers, ``run_agent(toolsets=...)`` and the ledger ``@tool``s given as ``tools=``:

- each model request is a model step ``<step>.turn.<n>``, its input hash over the whole request
  (model name, messages, settings, request parameters with the tool definitions); the stored
  ``ModelResponse`` is replayed on resume, never asked again;
- each tool call is the ledger step ``<step>.turn.<n>.tools.<i>.<tool>`` (``i``: its place in
  the stored answer): a ledger ``@tool`` of its declared kind; a tool of the agent's a read, or
  an effect when ``effects=`` names it (its lookup the reconcile, ``effect_key()`` its key
  inside the tool). The step's inputs are the model's arguments, never the deps; its result is
  the tool's return as JSON, handed to PydanticAI on the first run as on a replay;
- the tool calls of one answer run as one ``ctx.parallel`` fan-out: PydanticAI validates them
  all (``wrap_tool_validate`` says which are coming), then starts them as concurrent tasks; the
  toolset holds each (``ledger.adapters._gather``) until every validated call has arrived.
  Calls that require approval follow the fan-out one at a time, each behind runledger's approval
  gate; a rejection is PydanticAI's denial (``ToolDenied``), handed to the model;
- streaming is refused: a model step stores one whole answer; so is a PydanticAI run started
  directly (``Agent.iter``, which ``run`` goes through, and ``run_stream``) inside a runledger
  execution, which would bypass the ledger;
- structured output, output validation and ``ModelRetry`` retries are PydanticAI's own: they
  depend only on the stored answers, so a resume takes the same path.

Where the steps are recorded: an ``async def`` ledger agent awaits ``run_agent`` and the
PydanticAI run is a coroutine on its loop (``OnLoop``: each step awaited on the
``AsyncRunContext``); a sync ledger agent's PydanticAI run is a coroutine on the worker's shared
loop, and each model request and tool batch crosses to the run's thread (``Bridge``), which holds
the run's ledger context. No thread or loop per run either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger import canonical, faultpoints, live
from ledger.adapters import _bridge, register_transcript
from ledger.adapters._effect import CurrentEffect
from ledger.engine import RunContext
from ledger.errors import AgentDefinitionError
from ledger.registry import Tool, require_idempotency_key
from ledger.schemas import HIDDEN_PARAMS

if TYPE_CHECKING:
    from ledger.adapters._gather import Held, ToolCall

#: An effect's lookup: did the call with this key happen? (its result, or NOT_HAPPENED / None)
Lookup = Callable[..., Any]

SUPPORTED = (2, 3)  # pydantic-ai >= 2, < 3

#: Keys left out of the hashed request: they change on every run of the same conversation
#: (clock readings, PydanticAI's per-run ids), not what the model is asked.
VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "provider_response_id"})

STREAMING = (
    "streaming is not durable under runledger: a model step stores one whole answer, so "
    "run_agent runs the agent with Agent.run; drop event_stream_handler= (and do not call "
    "run_stream/run_stream_events/iter's streams on a ledger agent)"
)


def _framework() -> Any:
    try:
        import pydantic_ai
    except ImportError as exc:  # pragma: no cover - the extra is installed in the dev venv
        raise AgentDefinitionError(
            "ledger.adapters.pydantic_ai needs PydanticAI: pip install 'runledger[pydantic-ai]'"
        ) from exc
    check_version(pydantic_ai.__version__)
    return pydantic_ai


def check_version(version: str) -> None:
    """Refuse a PydanticAI outside the pinned range (``>=2,<3``)."""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = -1
    if not SUPPORTED[0] <= major < SUPPORTED[1]:
        raise AgentDefinitionError(
            f"PydanticAI {version} is outside the pinned range >=2,<3 that "
            "ledger.adapters.pydantic_ai supports: install 'runledger[pydantic-ai]'"
        )


# --- the model ---------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """JSON data without the volatile keys, for hashing."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class Turns:
    """Counts the model requests of one agent run and remembers which turn asked for each tool
    call (by its id in the stored answer), to name the tool calls' steps."""

    def __init__(self, *, effects: Mapping[str, Any] | None = None) -> None:
        self.n = 0
        self.calls: dict[str, tuple[int, int]] = {}
        self.effects = dict(effects or {})

    def check_effects(self, parameters: Any) -> None:
        """Before the first request is asked: every name in ``effects=`` is one of the tools
        the agent offers the model (a misspelt effect would otherwise run as a read)."""
        offered = {t.name for t in getattr(parameters, "function_tools", [])}
        unknown = sorted(set(self.effects) - offered)
        if unknown:
            raise AgentDefinitionError(
                f"run_agent(effects=...) names {', '.join(map(repr, unknown))}, which the "
                f"PydanticAI agent does not offer the model (its tools: "
                f"{', '.join(sorted(offered)) or 'none'})"
            )


@functools.cache
def _adapters() -> tuple[Any, Any]:
    """PydanticAI's request parameters and response as JSON (built once: ~0.2 s each time)."""
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models import ModelRequestParameters

    return TypeAdapter(ModelRequestParameters), TypeAdapter(ModelResponse)


def ledger_model(ctx: RunContext, wrapped: Any, recorder: Recorder, turns: Turns) -> Any:
    """``wrapped`` (a PydanticAI ``Model``) whose requests are the run's model steps."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolCallPart
    from pydantic_ai.models.wrapper import WrapperModel

    params_adapter, response_adapter = _adapters()

    class LedgerModel(WrapperModel):
        async def request(  # type: ignore[override]
            self, messages: list[Any], model_settings: Any, model_request_parameters: Any
        ) -> Any:
            turns.n += 1
            turn = turns.n
            if turn == 1:
                turns.check_effects(model_request_parameters)
            request = {
                "model": f"{self.wrapped.system}:{self.wrapped.model_name}",
                "messages": _plain(ModelMessagesTypeAdapter.dump_python(messages, mode="json")),
                "settings": _plain(dict(model_settings or {})),
                "parameters": _plain(
                    params_adapter.dump_python(model_request_parameters, mode="json")
                ),
            }

            async def send() -> dict[str, Any]:
                with Agent.using_thread_executor(_sync_tools()):
                    if live.wanted() and _streams(self.wrapped):  # a reader may follow live
                        response = await _streamed(
                            self.wrapped, messages, model_settings, model_request_parameters
                        )
                    else:
                        response = await self.wrapped.request(
                            messages, model_settings, model_request_parameters
                        )
                return {"response": response_adapter.dump_python(response, mode="json")}

            answer = await recorder.record_model(ctx, request, send, f"turn.{turn}")
            response = response_adapter.validate_python(answer["response"])
            index = 0
            for part in response.parts:
                if isinstance(part, ToolCallPart):
                    turns.calls[part.tool_call_id] = (turn, index)
                    index += 1
            return response

        def request_stream(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            raise AgentDefinitionError(STREAMING)

    return LedgerModel(wrapped)


def _streams(model: Any) -> bool:
    """Whether ``model`` answers a streamed request (a ``FunctionModel`` only with its
    ``stream_function``)."""
    from pydantic_ai.models import Model
    from pydantic_ai.models.function import FunctionModel

    if isinstance(model, FunctionModel):
        return model.stream_function is not None
    return type(model).request_stream is not Model.request_stream


async def _streamed(model: Any, messages: list[Any], settings: Any, parameters: Any) -> Any:
    """The model's whole answer, asked for as a stream: its text handed to
    ``ledger.live.delta`` as it arrives (live readers), the ``ModelResponse`` returned whole
    (the step records it once, as an answer asked for at once)."""
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

    async with model.request_stream(messages, settings, parameters) as streamed:
        async for event in streamed:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                live.delta(event.part.content)
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                live.delta(event.delta.content_delta)
        return streamed.get()


# --- the tools ---------------------------------------------------------------------------------


def _visible(tool: Tool) -> list[str]:
    return [p for p in inspect.signature(tool.fn).parameters if p not in HIDDEN_PARAMS]


def check_tools(tools: Sequence[Tool]) -> None:
    """Refuse, at registration, what the ledger cannot run as a PydanticAI tool."""
    for tool in tools:
        if not isinstance(tool, Tool):
            raise AgentDefinitionError(
                f"run_agent(tools=...) takes ledger @tool functions, not {tool!r}: declare it "
                "with @tool(kind='read') or @tool(kind='effect', reconcile=...)"
            )
        if tool.kind == "effect":
            require_idempotency_key(tool.name, tool.fn)


Approver = Callable[[str, dict[str, Any]], bool]


def check_approvals(
    tools: Sequence[Tool], requires_approval: Any, *, effects: Mapping[str, Any] | None = None
) -> Approver:
    """``run_agent(requires_approval=...)`` as a function of (tool name, arguments): tool names
    or ``@tool``s (every call), or a function deciding per call (as PydanticAI's
    ``ApprovalRequiredToolset`` does). Refused for tools that are not effects: runledger's
    approval gate stands before an effect's intent row."""
    if callable(requires_approval) and not isinstance(requires_approval, Tool):
        decide = requires_approval
        gateable = {t.name for t in tools if t.kind == "effect"} | set(effects or {})
        return lambda name, args: name in gateable and bool(decide(name, args))
    named = {t.name if isinstance(t, Tool) else str(t) for t in requires_approval or ()}
    kinds = {t.name: str(t.kind) for t in tools} | dict.fromkeys(effects or {}, "effect")
    for name in sorted(named):
        if name not in kinds:
            raise AgentDefinitionError(
                f"requires_approval names {name!r}, which is not one of run_agent's tools "
                "nor named in its effects="
            )
        if kinds[name] != "effect":
            raise AgentDefinitionError(
                f"tool {name!r} requires approval but is a {kinds[name]}: runledger's approval "
                'gate stands before an effect; declare it @tool(kind="effect", reconcile=...)'
            )
    return lambda name, _args: name in named


#: A tool's ``ModelRetry``, recorded as its step's result (replayed as the same retry).
RETRY = "$pydantic_ai.model_retry"


@dataclass
class Options:
    """How the tool calls of one answer run: at most ``max_workers`` at once, and which wait
    at runledger's approval gate (``approver``, from ``run_agent(requires_approval=...)``)."""

    max_workers: int = 4
    approver: Approver = lambda _name, _args: False

    def gated(self, call: ToolCall) -> bool:
        return call.tool.approval is not None or self.approver(call.tool.name, call.arguments)

    def call_gated(self, ctx: RunContext, call: ToolCall, step: str) -> Any:
        from pydantic_ai import ToolDenied

        from ledger.errors import ApprovalRejected

        own = None if call.tool.approval is not None else True  # the tool's own policy first
        try:
            return ctx.call(call.tool, step=step[:200], approval=own, **call.arguments)
        except ApprovalRejected as exc:  # PydanticAI's denial path: the model is told
            return ToolDenied(f"The tool call was denied: {exc}")

    async def acall_gated(self, ctx: RunContext, call: ToolCall, step: str) -> Any:
        from pydantic_ai import ToolDenied

        from ledger.errors import ApprovalRejected

        own = None if call.tool.approval is not None else True
        try:
            return await ctx.call(  # type: ignore[misc]
                call.tool, step=step[:200], approval=own, **call.arguments
            )
        except ApprovalRejected as exc:
            return ToolDenied(f"The tool call was denied: {exc}")


Sender = Callable[[], Awaitable[Any]]
#: Runs a framework tool for its step: (effect key, fencing token) -> its JSON result.
Invoke = Callable[[str | None, int | None], Awaitable[Any]]


class Bridge(_bridge.Bridge):
    """A sync ledger agent's steps: the PydanticAI agent runs as a coroutine on the worker's
    shared event loop and hands each model request and each answer's tool calls to the run's
    thread, which holds the run's ledger context (``ledger.adapters._bridge``; a call whose
    ledger work raised is told ``Stopped``)."""

    def __init__(self) -> None:
        super().__init__(name="pydantic-ai-agent")

    async def record_model(
        self, ctx: RunContext, request: dict[str, Any], send: Sender, step: str
    ) -> Any:
        def sync_send(_data: dict[str, Any]) -> Any:
            # On the shared loop's thread, with the model step this thread executes bound.
            return self.on_loop(live.carry(send)())  # type: ignore[arg-type]

        def run() -> Any:
            faultpoints.point("pydantic_ai.before_request")  # between two turns
            return ctx.model_request(request, send=sync_send, model=request["model"], step=step)

        return await self.ask(run)

    async def record_batch(self, ctx: RunContext, batch: list[Held], options: Options) -> Any:
        from ledger.adapters._gather import run_calls

        def run() -> dict[int, Any]:
            return run_calls(
                ctx,
                batch,
                prefix=f"turn.{batch[0].answer}",
                max_workers=options.max_workers,
                gated=options.gated,
                call_gated=lambda call, step: options.call_gated(ctx, call, step),
            )

        return await self.ask(run)

    def tool_fn(self, invoke: Invoke) -> Callable[..., Any]:
        def fn(
            *, idempotency_key: str | None = None, fencing_token: int | None = None, **_: Any
        ) -> Any:
            return self.on_loop(invoke(idempotency_key, fencing_token))  # type: ignore[arg-type]

        return fn


class OnLoop:
    """An ``async def`` ledger agent's steps: the PydanticAI agent runs on the caller's loop
    (the worker's shared loop) and awaits the ``AsyncRunContext``'s calls there, one at a
    time; no thread of its own."""

    def __init__(self) -> None:
        self._lock: asyncio.Lock | None = None

    def _one_at_a_time(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def record_model(
        self, ctx: RunContext, request: dict[str, Any], send: Sender, step: str
    ) -> Any:
        async def async_send(_data: dict[str, Any]) -> Any:
            return await send()

        async with self._one_at_a_time():
            faultpoints.point("pydantic_ai.before_request")  # between two turns
            return await ctx.model_request(  # type: ignore[misc]
                request, send=async_send, model=request["model"], step=step
            )

    async def record_batch(self, ctx: RunContext, batch: list[Held], options: Options) -> Any:
        prefix = f"turn.{batch[0].answer}"
        behind = {h.index for h in batch if options.gated(h.payload)}
        plain = [h for h in batch if h.index not in behind]
        out: dict[int, Any] = {}
        async with self._one_at_a_time():
            if plain:
                keys = {h.index: f"{h.index}.{h.payload.tool.name}"[:100] for h in plain}
                branches = {keys[h.index]: (h.payload.tool, h.payload.arguments) for h in plain}
                done = await ctx.parallel(  # type: ignore[misc]
                    branches, step=f"{prefix}.tools", max_workers=options.max_workers
                )
                out.update({index: done[key] for index, key in keys.items()})
            for held in batch:
                if held.index in behind:
                    step = f"{prefix}.tools.{held.index}.{held.payload.tool.name}"
                    out[held.index] = await options.acall_gated(ctx, held.payload, step)
        return out

    def tool_fn(self, invoke: Invoke) -> Callable[..., Any]:
        async def fn(
            *, idempotency_key: str | None = None, fencing_token: int | None = None, **_: Any
        ) -> Any:
            return await invoke(idempotency_key, fencing_token)

        return fn


Recorder = Bridge | OnLoop


def _takes_fencing_token(fn: Callable[..., Any] | None) -> bool:
    if fn is None:
        return False
    try:
        return "fencing_token" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def ledger_capability(
    ctx: RunContext,
    tools: Sequence[Tool],
    effects: Mapping[str, Lookup | None],
    recorder: Recorder,
    turns: Turns,
    options: Options,
) -> Any:
    """PydanticAI's own extension point for a run: a capability whose wrapper toolset stands
    around every toolset the agent runs with (``@agent.tool``, ``@agent.tool_plain``, toolsets,
    MCP servers, the ledger ``@tool``s given as ``run_agent(tools=...)``), so each call is the
    ledger step ``turn.<n>.tools.<i>.<tool>`` (``i``: its place in the stored answer). The calls
    of one answer are gathered (``ledger.adapters._gather``) into one ``ctx.parallel`` fan-out;
    those behind an approval gate follow, one at a time."""
    from pydantic_ai import Agent, ApprovalRequired, CallDeferred, ModelRetry
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.toolsets import WrapperToolset
    from pydantic_core import to_jsonable_python

    from ledger.adapters._gather import Gather, ToolCall

    by_name = {t.name: t for t in tools}

    def where(tool_call_id: str | None) -> tuple[int, int]:
        return turns.calls.get(tool_call_id or "", (turns.n, 0))

    async def dispatch(batch: list[Held]) -> dict[int, Any]:
        return await recorder.record_batch(ctx, batch, options)  # type: ignore[no-any-return]

    gather = Gather(dispatch)

    def framework_tool(
        name: str, tool_args: dict[str, Any], run_ctx: Any, tool: Any, wrapped: Any
    ) -> Tool:
        """The ledger step of a tool PydanticAI owns: a read, or an effect when ``effects``
        names it (its lookup the reconcile). ``run_ctx`` (with the deps) is the author's,
        never hashed: the step's inputs are the model's arguments."""
        effect = name in effects
        lookup = effects.get(name)

        async def invoke(key: str | None, token: int | None) -> Any:
            marked = _EFFECT.set((key, token)) if effect and key is not None else None
            try:
                # Sync tools on the pool that gives connections back, also when this runs in
                # a context copied from a fan-out thread (a sync ledger agent's).
                with Agent.using_thread_executor(_sync_tools()):
                    value = await wrapped.call_tool(name, tool_args, run_ctx, tool)
            except ModelRetry as exc:  # recorded, so a replay retries the same way
                return {RETRY: exc.message}
            except (ApprovalRequired, CallDeferred) as exc:
                raise AgentDefinitionError(
                    f"tool {name!r} raised {type(exc).__name__}: a call deferred out of the run "
                    "is not durable under runledger; declare the approval instead "
                    f"(run_agent(requires_approval=[{name!r}]) with {name!r} in effects=), so "
                    "runledger's gate stands before the effect's intent row"
                ) from exc
            finally:
                if marked is not None:
                    _EFFECT.reset(marked)
            return to_jsonable_python(value)

        return Tool(
            name=name,
            kind="effect" if effect else "read",
            fn=recorder.tool_fn(invoke),
            reconcile=lookup,
            description=getattr(tool.tool_def, "description", None) or "",
            takes_fencing_token=effect,
            reconcile_takes_fencing_token=_takes_fencing_token(lookup),
            is_async=isinstance(recorder, OnLoop),
        )

    class LedgerToolset(WrapperToolset[Any]):
        async def call_tool(
            self, name: str, tool_args: dict[str, Any], run_ctx: Any, tool: Any
        ) -> Any:
            turn, index = where(run_ctx.tool_call_id)
            if name in by_name:
                call = ToolCall(by_name[name], dict(tool_args))
            else:
                arguments = to_jsonable_python(tool_args)
                own = framework_tool(name, tool_args, run_ctx, tool, self.wrapped)
                call = ToolCall(own, arguments)
            result = await gather.call(str(turn), index, call)
            if isinstance(result, dict) and set(result) == {RETRY}:
                raise ModelRetry(result[RETRY])
            return result

    class LedgerCapability(AbstractCapability[Any]):
        def get_wrapper_toolset(self, toolset: Any) -> Any:
            return LedgerToolset(toolset)

        async def wrap_tool_validate(
            self, run_ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
            validated = await handler(args)
            if tool_def.kind == "function":  # valid: PydanticAI will run it
                turn, index = where(call.tool_call_id)
                gather.expect(str(turn), index)
            return validated

    return LedgerCapability()


def _leaves(toolsets: Sequence[Any]) -> list[Any]:
    found: list[Any] = []
    for toolset in toolsets:
        toolset.apply(found.append)
    return found


def check_toolsets(agent: Any, toolsets: Any) -> list[Any]:
    """``run_agent(toolsets=...)`` as a list of PydanticAI toolsets; refuses anything else, and
    toolsets whose calls run outside the run (``ExternalToolset``: deferred to the caller)."""
    from pydantic_ai.toolsets import AbstractToolset, ExternalToolset

    if toolsets is None:
        given: list[Any] = []
    elif isinstance(toolsets, AbstractToolset):
        given = [toolsets]
    elif isinstance(toolsets, (list, tuple)):
        given = list(toolsets)
    else:
        raise AgentDefinitionError(
            f"run_agent(toolsets=...) takes a list of PydanticAI toolsets, not {toolsets!r}"
        )
    for toolset in given:
        if not isinstance(toolset, AbstractToolset):
            raise AgentDefinitionError(
                f"run_agent(toolsets=...) takes PydanticAI toolsets (FunctionToolset, an MCP "
                f"server, ...), not {toolset!r}: give ledger @tool functions as tools=[...]"
            )
    external = sorted(
        {
            type(leaf).__name__
            for leaf in _leaves([*agent.toolsets, *given])
            if isinstance(leaf, ExternalToolset)
        }
    )
    if external:
        raise AgentDefinitionError(
            f"PydanticAI agent has toolsets of its own ({', '.join(external)}) whose calls "
            "would run outside the ledger (an external tool's call is deferred to the caller, "
            "outside the run altogether): declare the tools on the agent or as ledger @tools"
        )
    return given


def check_effects(tools: Sequence[Tool], effects: Any) -> dict[str, Lookup | None]:
    """``run_agent(effects={tool name: lookup or None})``."""
    if effects is None:
        return {}
    if not isinstance(effects, Mapping):
        raise AgentDefinitionError(
            "run_agent(effects=...) maps tool names to their lookups (or None), e.g. "
            f'effects={{"refund_charge": find_refund}}, not {effects!r}'
        )
    ledger_names = {t.name for t in tools}
    for name, lookup in effects.items():
        if not isinstance(name, str) or not name:
            raise AgentDefinitionError(f"run_agent(effects=...) keys are tool names, not {name!r}")
        if name in ledger_names:
            raise AgentDefinitionError(
                f"run_agent(effects=...) names {name!r}, a ledger @tool given as tools=[...]: "
                "its kind is its own declaration"
            )
        if lookup is not None and not callable(lookup):
            raise AgentDefinitionError(
                f"run_agent(effects={{{name!r}: ...}}) takes a lookup function of the effect "
                f"key (or None: a crash inside it stops the run for a person), not {lookup!r}"
            )
    return dict(effects)


# --- what an effect tool reads ------------------------------------------------------------------

#: The effect key and fencing token of the framework tool running now as an effect step.
_EFFECT = CurrentEffect(
    "runledger_pydantic_ai_effect",
    'a PydanticAI tool that run_agent(effects={"<tool name>": lookup}) declares an effect',
)
#: Set while ``run_agent`` drives a PydanticAI run (the guard lets that one through).
_DURABLE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "runledger_pydantic_ai_durable", default=False
)


def effect_key() -> str:
    """Inside a tool that ``run_agent(effects=...)`` names, while it runs as its effect step:
    the effect's key (``<run id>:<step id>``), stable across crashes and resumes. Send it as the
    downstream's idempotency key; the effect's lookup receives the same key."""
    return _EFFECT.key()


def fencing_token() -> int | None:
    """Inside an effect tool (as ``effect_key``): this execution's fencing token, which grows
    with every takeover of the run (for a downstream that refuses a stale writer)."""
    return _EFFECT.token()


async def send_effect_key(
    run_ctx: Any, call_tool: Callable[..., Awaitable[Any]], name: str, args: dict[str, Any]
) -> Any:
    """An ``MCPToolset``'s ``process_tool_call``: a call that runs as an effect step carries its
    key in the MCP request's ``_meta`` (``{"idempotency_key": ..., "fencing_token": ...}``), for
    the server to send downstream (an MCP tool runs in the server, where ``effect_key()`` cannot
    reach). Other calls go as they are.

        MCPToolset("https://mcp.example/billing", process_tool_call=send_effect_key)
    """
    current = _EFFECT.get()
    if current is None:
        return await call_tool(name, args)
    meta: dict[str, Any] = {"idempotency_key": current[0]}
    if current[1] is not None:
        meta["fencing_token"] = current[1]
    return await call_tool(name, args, metadata=meta)


# --- the author's call -------------------------------------------------------------------------


def run_agent(
    ctx: RunContext,
    agent: Any,
    prompt: str,
    *,
    tools: Sequence[Tool] = (),
    effects: Mapping[str, Lookup | None] | None = None,
    toolsets: Sequence[Any] | None = None,
    step: str = "agent",
    requires_approval: Sequence[Tool | str] | Approver = (),
    max_workers: int = 4,
    **run_kwargs: Any,
) -> Any:
    """Run the PydanticAI ``agent`` on ``prompt`` durably inside a ledger agent; its output.

    The agent keeps its own tools (``@agent.tool`` with ``RunContext[Deps]``,
    ``@agent.tool_plain``, toolsets, MCP servers, sync or async) and ``run_agent(toolsets=...)``
    adds more: every call is a step, a read unless ``effects`` names it — ``effects={"tool
    name": lookup}`` makes it an effect with an intent row, its key (``effect_key()`` inside the
    tool) and ``lookup(idempotency_key)`` as its reconcile (``None``: a crash inside it stops
    the run for a person). ``tools`` are ledger ``@tool`` functions (also listed in the ledger
    agent's ``tools=``), each of its own declared kind. The tool calls of one model answer run
    as one fan-out of at most ``max_workers`` at once. ``requires_approval`` (effect names or
    tools, or a function of the tool's name and arguments) puts those effects' calls behind
    runledger's approval gate; a rejection is PydanticAI's denial (``ToolDenied``), handed to
    the model. ``run_kwargs`` go to ``Agent.run`` (``deps``, ``output_type``,
    ``model_settings``, ``usage_limits``…): ``deps`` are the author's objects, built by the
    ledger agent on each execution and never hashed. A structured output (a pydantic model) is
    returned as its JSON data.

    In an ``async def`` ledger agent, ``await run_agent(ctx, ...)``: the agent runs as a
    coroutine on the worker's event loop. In a sync one, it runs on the worker's shared loop
    while the run's thread records its steps.
    """
    recorder, kwargs = _setup(
        ctx, agent, tools, effects, toolsets, requires_approval, max_workers, run_kwargs
    )

    async def main() -> Any:
        durable = _DURABLE.set(True)
        try:
            with agent.using_thread_executor(_sync_tools()):
                return await agent.run(prompt, **kwargs)
        finally:
            _DURABLE.reset(durable)

    if isinstance(recorder, OnLoop):
        return _awaited_output(ctx, main, step)
    assert isinstance(recorder, Bridge)
    with ctx.scope(step):
        result = recorder.serve(main(), shared=True)
    return _output(result.output, step)


def iter_agent(
    ctx: RunContext,
    agent: Any,
    prompt: str,
    *,
    tools: Sequence[Tool] = (),
    effects: Mapping[str, Lookup | None] | None = None,
    toolsets: Sequence[Any] | None = None,
    step: str = "agent",
    requires_approval: Sequence[Tool | str] | Approver = (),
    max_workers: int = 4,
    **run_kwargs: Any,
) -> contextlib.AbstractAsyncContextManager[Any]:
    """PydanticAI's ``agent.iter`` made durable, in an ``async def`` ledger agent:

        async with iter_agent(ctx, desk, prompt, deps=..., effects=...) as running:
            async for node in running:
                ...
        output = running.result.output

    The same steps as ``run_agent`` (the same arguments): each model request a model step,
    each tool call a step. The nodes depend only on the stored answers, so a resume walks the
    same nodes, asking nothing and running no tool again. Calls the ledger agent makes inside
    the block are under ``step``'s scope. A sync ledger agent cannot iterate a coroutine's
    nodes: there it raises; use ``run_agent``.
    """
    from ledger.engine.context import AsyncRunContext

    if not isinstance(ctx, AsyncRunContext):
        raise AgentDefinitionError(
            "iter_agent iterates PydanticAI's nodes on the event loop: make the ledger agent an "
            "async def (async with iter_agent(ctx, ...)), or use run_agent in a sync one"
        )
    _, kwargs = _setup(
        ctx, agent, tools, effects, toolsets, requires_approval, max_workers, run_kwargs
    )
    return _iterate(ctx, agent, prompt, step, kwargs)


@contextlib.asynccontextmanager
async def _iterate(
    ctx: RunContext, agent: Any, prompt: str, step: str, kwargs: dict[str, Any]
) -> Any:
    with ctx.scope(step):
        durable = _DURABLE.set(True)
        try:
            with agent.using_thread_executor(_sync_tools()):
                async with agent.iter(prompt, **kwargs) as running:
                    yield running
        finally:
            _DURABLE.reset(durable)


def _setup(
    ctx: RunContext,
    agent: Any,
    tools: Sequence[Tool],
    effects: Any,
    toolsets: Any,
    requires_approval: Any,
    max_workers: int,
    run_kwargs: dict[str, Any],
) -> tuple[Recorder, dict[str, Any]]:
    """Check ``run_agent``'s arguments (nothing runs before they pass) and build what the
    PydanticAI run takes: the ledger model, the capability, the toolsets."""
    _framework()
    check_tools(tools)
    if max_workers < 1:
        raise AgentDefinitionError("run_agent(max_workers=...) must be at least 1")
    if run_kwargs.get("event_stream_handler") is not None:
        raise AgentDefinitionError(STREAMING)
    for name in ("capabilities", "conversation"):
        if run_kwargs.get(name) is not None:
            raise AgentDefinitionError(f"run_agent({name}=...) is not supported under runledger")
    declared = check_effects(tools, effects)
    given = check_toolsets(agent, toolsets)
    named = check_approvals(tools, requires_approval, effects=declared)
    if agent.model is None and "model" not in run_kwargs:
        raise AgentDefinitionError("the PydanticAI agent has no model: give it one")
    from pydantic_ai.models import infer_model

    from ledger.engine.context import AsyncRunContext

    recorder: Recorder = OnLoop() if isinstance(ctx, AsyncRunContext) else Bridge()
    turns = Turns(effects=declared)
    rest = dict(run_kwargs)
    model = ledger_model(ctx, infer_model(rest.pop("model", agent.model)), recorder, turns)
    options = Options(max_workers=max_workers, approver=named)
    capability = ledger_capability(ctx, tools, declared, recorder, turns, options)
    run_toolsets = [*([_ledger_functions(tools)] if tools else []), *given]
    kwargs = {
        "model": model,
        "toolsets": run_toolsets or None,
        "capabilities": [capability],
        **rest,
    }
    return recorder, kwargs


class _ClosingExecutor(ThreadPoolExecutor):
    """Runs PydanticAI's sync tools (and sync model functions) on a bounded pool, giving back
    the database connection a tool took after each call (a tool may use the Django ORM)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        from ledger.engine.aio import _and_close

        return super().submit(_and_close, fn, *args, **kwargs)


_executor: tuple[int, _ClosingExecutor] | None = None
_executor_lock = threading.Lock()
#: Threads that run the sync tools of this process's PydanticAI agents.
SYNC_TOOL_THREADS = 32


def _sync_tools() -> _ClosingExecutor:
    global _executor
    with _executor_lock:
        if _executor is None or _executor[0] != os.getpid():
            pool = _ClosingExecutor(SYNC_TOOL_THREADS, thread_name_prefix="pydantic-ai-tool")
            _executor = (os.getpid(), pool)
        return _executor[1]


async def _awaited_output(ctx: RunContext, main: Callable[[], Awaitable[Any]], step: str) -> Any:
    with ctx.scope(step):
        result = await main()
    return _output(result.output, step)


def _output(output: Any, step: str) -> Any:
    if hasattr(output, "model_dump"):
        return output.model_dump(mode="json")
    return canonical.normalize(output, step_id=f"{step}.output")


def _ledger_functions(tools: Sequence[Tool]) -> Any:
    """The ledger ``@tool``s as a PydanticAI ``FunctionToolset`` (their schemas as the ledger
    sees them: ``idempotency_key`` and ``fencing_token`` are the engine's, never the model's)."""
    from pydantic_ai import ModelRetry
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset

    def validator(tool: Tool) -> Callable[..., None]:
        signature = inspect.signature(tool.fn)
        visible = set(_visible(tool))
        hidden = dict.fromkeys(HIDDEN_PARAMS & set(signature.parameters))

        def validate(run_ctx: Any, **args: Any) -> None:
            unknown = set(args) - visible
            if unknown:
                raise ModelRetry(f"{', '.join(sorted(unknown))} is not a parameter of {tool.name}")
            try:
                signature.bind(**args, **hidden)
            except TypeError as exc:
                raise ModelRetry(f"{tool.name}: {exc}") from exc

        return validate

    return FunctionToolset(
        [
            PydanticTool.from_schema(
                t.fn,
                name=t.name,
                description=t.description or None,
                json_schema=t.parameters(),
                args_validator=validator(t),
            )
            for t in tools
        ]
    )


# --- PydanticAI run directly inside a ledger agent ----------------------------------------------

DIRECT = (
    "PydanticAI agent {name!r} was run with {how} directly inside runledger run {run_id}: its "
    "model requests and tool calls would not be steps, so a resume would ask the model again "
    "and run every tool again. Run it with ledger.adapters.pydantic_ai.run_agent(ctx, agent, "
    "prompt, ...) (in an async def agent: await run_agent(...), or iter_agent for its nodes)"
)


def _refuse_direct(agent: Any, how: str) -> None:
    from ledger import logcontext

    run_id = logcontext.current().get("run_id")
    if run_id and not _DURABLE.get():
        if how == "run_stream":
            raise AgentDefinitionError(f"{STREAMING} (run {run_id})")
        raise AgentDefinitionError(
            DIRECT.format(name=getattr(agent, "name", None), how=how, run_id=run_id)
        )


def _install_guard() -> None:
    """Refuse, inside a runledger execution, a PydanticAI run not driven by ``run_agent``:
    ``Agent.iter`` (which ``run``, ``run_sync`` and ``run_stream_events`` go through) and
    ``run_stream`` raise at once, before the model is asked anything."""
    from pydantic_ai.agent import Agent
    from pydantic_ai.agent.abstract import AbstractAgent

    for cls, name in ((Agent, "iter"), (AbstractAgent, "run_stream")):
        original = cls.__dict__[name]
        if not getattr(original, "__runledger_guard__", False):
            setattr(cls, name, _guarded(original, name))


def _guarded(original: Callable[..., Any], how: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_direct(self, how)
        return original(self, *args, **kwargs)

    guarded.__runledger_guard__ = True  # type: ignore[attr-defined]
    return guarded


# --- the transcript ----------------------------------------------------------------------------


def transcript(run_id: str) -> list[dict[str, Any]]:
    """What was said in ``run_id``'s PydanticAI agents: each stored model answer's messages
    (the first turn's request too), with the step that said it. Reads only."""
    from ledger.selectors.transcript import pydantic_ai_turns

    entries: list[dict[str, Any]] = []
    for row in pydantic_ai_turns(run_id):
        inputs, result = row["inputs"] or {}, row["result"] or {}
        if row["step_id"].endswith(".turn.1"):
            for message in inputs.get("messages", []):
                entries.extend(_said(message, row["step_id"]))
        response = result.get("response") if isinstance(result, dict) else None
        if response:
            entries.extend(_said(response, row["step_id"]))
    return entries


def _said(message: dict[str, Any], step_id: str) -> list[dict[str, Any]]:
    said = []
    if message.get("instructions"):
        said.append(_entry("system", message["instructions"], "", step_id))
    for part in message.get("parts", []):
        kind = part.get("part_kind")
        time = part.get("timestamp") or message.get("timestamp") or ""
        if kind in ("system-prompt", "user-prompt", "text"):
            role = {"system-prompt": "system", "user-prompt": "user"}.get(kind, "assistant")
            content = part.get("content")
            text = content if isinstance(content, str) else canonical.dumps(content)
            said.append(_entry(role, text, time, step_id))
        elif kind == "tool-call":
            args = part.get("args")
            text = args if isinstance(args, str) else canonical.dumps(args or {})
            said.append(
                _entry("assistant", f"calls {part.get('tool_name')}({text})", time, step_id)
            )
    return said


def _entry(role: str, text: str, time: str, step_id: str) -> dict[str, Any]:
    return {"role": role, "text": text, "time": time, "step_id": step_id}


register_transcript("pydantic-ai", transcript)

with contextlib.suppress(ImportError):  # without the extra, run_agent refuses on its own
    _install_guard()
