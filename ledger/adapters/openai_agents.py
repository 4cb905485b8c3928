"""Durable OpenAI Agents SDK agents on the ledger (optional extra ``runledger[openai-agents]``).

``run(ctx, agent, input, model_provider=...)`` runs an SDK ``Agent`` inside a runledger agent,
in the shape of DBOS's ``DBOSRunner`` and Temporal's ``OpenAIAgentsPlugin``: the SDK's own
``Runner`` drives the loop (handoffs, agents-as-tools, guardrails, structured output), and two
of its extension points route the work through the ledger:

- a ``ModelProvider`` whose models make each model call a model step (``<step>.turn.<n>``),
  hashed over the whole request — agent, instructions, input items, settings, the definitions
  of the tools and handoffs, the output schema — and replayed from its stored answer;
- every ``FunctionTool`` of the agent graph is wrapped so that each invocation is a tool step
  (``<model step>.tools.<i>.<name>``: ``i`` is the call's position in the model's answer). A
  plain SDK tool is a read; an effect is a runledger ``@tool(kind="effect", reconcile=...)``
  handed to the SDK with ``function_tool(effect)``: intent row before, the effect key as its
  idempotency key, reconcile through its lookup after a crash, a person asked when none.
  ``needs_approval=True`` on an effect maps onto runledger's approval gate.

The SDK runs as a coroutine on the worker's shared event loop (``ledger.engine.aio``; no loop or
thread per run); every ledger call is handed back to the calling (worker) thread, which owns
the database connection, the lease and the fencing token.
The function-tool calls of one answer are gathered (``ledger.adapters._gather``) and run as one
``ctx.parallel`` fan-out, chained in the answer's order; calls behind ``needs_approval`` follow
it one at a time. An agent used as a tool is not a step itself: its own model calls and tools
are steps under the tool call's step id. Input and output guardrail results are recorded as
read steps (``<step>.guardrail.<where>.<agent>.<name>``) and replayed, not re-derived.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import json
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ledger import canonical, faultpoints, live
from ledger.adapters import register_transcript
from ledger.adapters._bridge import Bridge
from ledger.adapters._effect import CurrentEffect
from ledger.adapters._gather import Gather, Held, ToolCall, run_calls
from ledger.engine import RunContext
from ledger.errors import AgentDefinitionError
from ledger.registry import Tool, require_idempotency_key
from ledger.states import StepKind

try:
    import agents as sdk
    from agents import (
        Agent,
        FunctionTool,
        GuardrailFunctionOutput,
        InputGuardrail,
        Model,
        ModelProvider,
        ModelResponse,
        OutputGuardrail,
        RunConfig,
        Runner,
    )
    from agents.run import AgentRunner
    from agents.usage import Usage
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseOutputItem,
        ResponseOutputItemDoneEvent,
        ResponseTextDeltaEvent,
        ResponseUsage,
    )
    from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
    from pydantic import BaseModel, TypeAdapter
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "ledger.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'runledger[openai-agents]'"
    ) from exc

DIRECT = (
    "OpenAI Agents SDK agent {name!r} was run with {how} directly inside runledger run "
    "{run_id}: its model calls and tool calls would not be steps, so a resume would ask the "
    "model again and run every tool again. Run it with ledger.adapters.openai_agents.run(ctx, "
    "agent, input, ...) (or run_streamed(ctx, ...) for its stream events)"
)
SESSION = (
    "session={kind} keeps the conversation outside the ledger: a resume would read a history "
    "the crashed execution had already added to, and every model step would be stale. Use "
    "ledger.adapters.openai_agents.LedgerSession(session_id), whose items live in the run's "
    "steps"
)

#: The SDK versions this adapter is written against (the extra pins the same range).
SUPPORTED = ((0, 24), (0, 25))


def _check_version(version: str) -> None:
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if not (SUPPORTED[0] <= parts < SUPPORTED[1]):
        raise ImportError(
            f"ledger.adapters.openai_agents supports openai-agents >=0.24,<0.25, not {version}; "
            "install the pinned version: pip install 'runledger[openai-agents]'"
        )


_check_version(getattr(sdk, "__version__", "0"))

_OUTPUT = TypeAdapter(list[ResponseOutputItem])
#: Where the running model call is: (step-id prefix, its model-call counter).
_SCOPE: contextvars.ContextVar[tuple[str, list[int]]] = contextvars.ContextVar("runledger_oa")
#: The bridge of the durable SDK run on this task (nested ``Runner`` runs find it here).
_ACTIVE: contextvars.ContextVar[_Bridge | None] = contextvars.ContextVar(
    "runledger_oa_bridge", default=None
)
#: The effect key and fencing token of the SDK tool running now as an effect step.
_EFFECT = CurrentEffect(
    "runledger_oa_effect",
    'an SDK tool that run(effects={"<tool name>": lookup}) declares an effect',
)
#: An effect's lookup: did the call with this key happen? (its result, or NOT_HAPPENED / None)
Lookup = Callable[..., Any]
#: The runledger effect behind each FunctionTool ``function_tool`` made, by the tool's id.
_EFFECTS: dict[int, tuple[FunctionTool, Tool]] = {}


def function_tool(effect: Tool, *, needs_approval: bool = False) -> FunctionTool:
    """The SDK ``FunctionTool`` of a runledger ``@tool`` (an effect, usually): the model sees
    its name, description and parameters (``idempotency_key``/``fencing_token`` hidden); under
    ``run`` each call is the tool's step. ``needs_approval`` puts the call behind runledger's
    approval gate (effects only)."""
    if not isinstance(effect, Tool):
        raise AgentDefinitionError(
            f"function_tool() takes a runledger @tool, not {effect!r}; plain functions take the "
            "SDK's own @function_tool (a read step under run())"
        )
    if effect.kind == StepKind.EFFECT:
        require_idempotency_key(effect.name, effect.fn)
    if needs_approval and effect.kind != StepKind.EFFECT:
        raise AgentDefinitionError(
            f"tool {effect.name!r}: needs_approval is runledger's approval gate, which only "
            'effects have; declare it @tool(kind="effect", ...)'
        )

    async def not_durable(_ctx: Any, _arguments: str) -> Any:
        raise AgentDefinitionError(
            f"tool {effect.name!r} is a runledger tool: run its agent with "
            "ledger.adapters.openai_agents.run(ctx, agent, ...)"
        )

    made = FunctionTool(
        name=effect.name,
        description=effect.description,
        params_json_schema=effect.parameters(),
        on_invoke_tool=not_durable,
        strict_json_schema=False,
        needs_approval=needs_approval,
    )
    _EFFECTS[id(made)] = (made, effect)
    return made


@dataclasses.dataclass(frozen=True)
class SDKTool(Tool):
    """A plain SDK function tool as the ledger sees it: a read whose parameters are the SDK's
    JSON schema (what the tool-schema hash covers)."""

    sdk_schema: str = dataclasses.field(default="{}")

    def parameters(self) -> dict[str, Any]:
        schema: dict[str, Any] = json.loads(self.sdk_schema)
        return schema

    def schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "parameters": self.parameters(),
            "reconcile": False,
            "description": self.description,
        }


def ledger_tools(
    agent: Agent[Any], *, effects: Mapping[str, Lookup | None] | None = None
) -> list[Tool]:
    """The runledger tools of an SDK agent graph (its tools, its handoffs' and its
    agents-as-tools' tools), for ``@agent(tools=...)``: the run's tool-schema hash then covers
    the SDK's tool definitions, so a changed tool is a schema change on resume. ``effects``:
    the same as ``run``'s (those tools are effects). An MCP server's tools are listed by the
    server at run time: the model step's hash covers their definitions."""
    found: dict[str, Tool] = {}
    declared = _check_effects(effects)
    for function in _function_tools(agent):
        if id(function) in _EFFECTS:
            found[function.name] = _EFFECTS[id(function)][1]
        elif function.name in declared:
            found[function.name] = _named_effect(function, declared[function.name])
        elif not getattr(function, "_is_agent_tool", False):
            found[function.name] = _read_tool(function)
    return [found[name] for name in sorted(found)]


def run(
    ctx: RunContext,
    agent: Agent[Any],
    input: str | list[Any],
    *,
    model_provider: ModelProvider | None = None,
    run_config: RunConfig | None = None,
    step: str = "openai",
    max_workers: int = 4,
    effects: Mapping[str, Lookup | None] | None = None,
    **runner_kwargs: Any,
) -> Any:
    """Run ``agent`` with the SDK's ``Runner`` durably; returns the SDK's ``RunResult``.

    ``model_provider`` resolves the agents' model names (the SDK's OpenAI provider when
    omitted); an agent whose ``model`` is a ``Model`` object is refused: give it a name.
    The function-tool calls of one model answer run as one fan-out of at most ``max_workers``
    at once. ``effects={"tool name": lookup}`` makes the SDK's own tools of that name (a
    ``@function_tool``, an MCP server's tool) effects: an intent row first, ``effect_key()``
    inside the tool (an MCP server receives it in the request's ``_meta`` through
    ``tool_meta_resolver=send_effect_key``), ``lookup(idempotency_key)`` after a crash inside
    it (``None``: the run stops for a person). ``runner_kwargs`` go to ``Runner.run``
    (``max_turns``, ``context``, ``session=LedgerSession(...)``, ...).
    """
    bridge, durable, config, kwargs = _prepare(
        ctx, agent, model_provider, run_config, step, max_workers, effects, runner_kwargs
    )
    return bridge.run(lambda: Runner.run(durable, input, run_config=config, **kwargs), agent)


def run_streamed(
    ctx: RunContext,
    agent: Agent[Any],
    input: str | list[Any],
    *,
    on_event: Callable[[Any], Any] | None = None,
    model_provider: ModelProvider | None = None,
    run_config: RunConfig | None = None,
    step: str = "openai",
    max_workers: int = 4,
    effects: Mapping[str, Lookup | None] | None = None,
    **runner_kwargs: Any,
) -> Any:
    """``Runner.run_streamed`` durably; returns the finished ``RunResultStreaming``.

    The same steps as ``run``: each streamed model answer is recorded once, whole, as its model
    step, and replayed whole (one ``response.completed`` event) on a resume. While the answer is
    live, ``on_event(event)`` (sync or async) is given each of the SDK's stream events as it
    comes (``RawResponsesStreamEvent`` with the text deltas, run items, agent updates); a
    replayed turn gives it the events the SDK makes from the stored answer. The deltas are not
    recorded one by one: they are the live view of the answer the step records.
    """
    bridge, durable, config, kwargs = _prepare(
        ctx, agent, model_provider, run_config, step, max_workers, effects, runner_kwargs
    )

    async def streamed() -> Any:
        result = Runner.run_streamed(durable, input, run_config=config, **kwargs)
        async for event in result.stream_events():
            if on_event is not None:
                told = on_event(event)
                if asyncio.iscoroutine(told):
                    await told
        return result

    return bridge.run(streamed, agent)


def _prepare(
    ctx: RunContext,
    agent: Agent[Any],
    model_provider: ModelProvider | None,
    run_config: RunConfig | None,
    step: str,
    max_workers: int,
    effects: Mapping[str, Lookup | None] | None,
    runner_kwargs: dict[str, Any],
) -> tuple[_Bridge, Agent[Any], RunConfig, dict[str, Any]]:
    """Check ``run``'s arguments (nothing runs before they pass) and build what the SDK's
    ``Runner`` takes: the durable clone of the agent graph, the run config, the session."""
    if not isinstance(agent, Agent):
        raise AgentDefinitionError(
            f"openai_agents.run takes an OpenAI Agents SDK Agent, not {agent!r}"
        )
    config = run_config or RunConfig()
    base = model_provider or config.model_provider
    declared = _check_effects(effects)
    _check_graph(agent, declared)
    if max_workers < 1:
        raise AgentDefinitionError("run(max_workers=...) must be at least 1")
    kwargs = dict(runner_kwargs)
    session = kwargs.get("session")
    if session is not None and not isinstance(session, LedgerSession):
        raise AgentDefinitionError(SESSION.format(kind=type(session).__name__))
    for name in ("previous_response_id", "conversation_id"):
        if kwargs.get(name) is not None or kwargs.get("auto_previous_response_id"):
            raise AgentDefinitionError(
                f"run({name}=...) keeps the conversation at the provider, outside the ledger: a "
                "resume would continue from a response the crashed execution had already "
                "chained to; keep the history in a LedgerSession instead"
            )
    bridge = _Bridge(ctx, step=step, max_workers=max_workers, effects=declared)
    if session is not None:
        kwargs["session"] = session.bound(bridge)
    config = dataclasses.replace(config, model_provider=_Provider(base, bridge))
    durable = bridge.durable(agent)
    return bridge, durable, config, kwargs


# --- what an effect tool reads -------------------------------------------------------------


def effect_key() -> str:
    """Inside an SDK tool that ``run(effects=...)`` names, while it runs as its effect step:
    the effect's key (``<run id>:<step id>``), stable across crashes and resumes. Send it as the
    downstream's idempotency key; the effect's lookup receives the same key."""
    return _EFFECT.key()


def fencing_token() -> int | None:
    """Inside an effect tool (as ``effect_key``): this execution's fencing token, which grows
    with every takeover of the run (for a downstream that refuses a stale writer)."""
    return _EFFECT.token()


def send_effect_key(_context: Any) -> dict[str, Any] | None:
    """An MCP server's ``tool_meta_resolver``: a call that runs as an effect step carries its
    key in the MCP request's ``_meta`` (``{"idempotency_key": ..., "fencing_token": ...}``), for
    the server to send downstream (an MCP tool runs in the server, where ``effect_key()``
    cannot reach). Other calls carry nothing.

        MCPServerStreamableHttp(params, tool_meta_resolver=openai_agents.send_effect_key)
    """
    current = _EFFECT.get()
    if current is None or current[0] is None:
        return None
    meta: dict[str, Any] = {"idempotency_key": current[0]}
    if current[1] is not None:
        meta["fencing_token"] = current[1]
    return meta


# --- the SDK's Runner, inside a runledger execution -----------------------------------------


class _LedgerRunner(AgentRunner):
    """The SDK's default runner (``set_default_agent_runner``, as Temporal's plugin installs
    its own): inside a durable ``run`` it gives every ``Runner`` run the durable clone of its
    agent — an agent used as a tool runs its own ``Runner`` run, whose tools are then steps
    too; anywhere else inside a runledger execution it refuses at once (the run would not be
    steps); outside one it is the SDK's runner as it was."""

    def __init__(self, inner: AgentRunner) -> None:
        self._inner = inner

    async def run(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return await self._inner.run(
            _durable_or_refused(starting_agent, "Runner.run"), input, **kwargs
        )

    def run_sync(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self._inner.run_sync(
            _durable_or_refused(starting_agent, "Runner.run_sync"), input, **kwargs
        )

    def run_streamed(self, starting_agent: Any, input: Any, **kwargs: Any) -> Any:
        return self._inner.run_streamed(
            _durable_or_refused(starting_agent, "Runner.run_streamed"), input, **kwargs
        )


def _durable_or_refused(agent: Any, how: str) -> Any:
    bridge = _ACTIVE.get()
    if bridge is not None:
        return bridge.durable(agent)
    from ledger import logcontext

    run_id = logcontext.current().get("run_id")
    if run_id:
        raise AgentDefinitionError(
            DIRECT.format(name=getattr(agent, "name", None), how=how, run_id=run_id)
        )
    return agent


def _install_runner() -> None:
    from agents.run import get_default_agent_runner, set_default_agent_runner

    current = get_default_agent_runner()
    if not isinstance(current, _LedgerRunner):
        set_default_agent_runner(_LedgerRunner(current))


_install_runner()


# --- a session whose items live in the run's steps -------------------------------------------


class LedgerSession:
    """An SDK ``Session`` (``get_items``/``add_items``/``pop_item``/``clear_session``) whose
    items live in the ledger: under ``run(..., session=LedgerSession("conv-42"))`` each
    operation is a read step ``<step>.session.<n>.<op>`` of the run, and the session's items are
    derived from those steps — the succeeded ``add``/``pop``/``clear`` steps of every run that
    used the session id, in the order they were recorded. So a resume replays what the crashed
    execution read and added (nothing is added twice, no history grows under a model step), and
    the next run of the conversation reads what the last one recorded.

    Outside a run (``await LedgerSession(id).get_items()`` in an application) it reads; adding
    there is refused: items are added by runs."""

    session_settings = None

    def __init__(self, session_id: str) -> None:
        if not isinstance(session_id, str) or not 1 <= len(session_id) <= 200:
            raise AgentDefinitionError(
                f"LedgerSession(session_id) takes a text of 1 to 200 characters, not {session_id!r}"
            )
        self.session_id = session_id
        self._bridge: _Bridge | None = None

    def bound(self, bridge: _Bridge) -> LedgerSession:
        made = LedgerSession(self.session_id)
        made._bridge = bridge
        return made

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await self._step("get", limit=limit)
        return list(items)

    async def add_items(self, items: list[Any]) -> None:
        if items:
            await self._step("add", items=_json(list(items)))

    async def pop_item(self) -> Any:
        return await self._step("pop")

    async def clear_session(self) -> None:
        await self._step("clear")

    async def _step(self, op: str, **arguments: Any) -> Any:
        from ledger.selectors.sessions import session_items

        bridge = self._bridge
        if bridge is None:
            if op != "get":
                raise AgentDefinitionError(
                    f"LedgerSession.{op} outside a run: a session's items are added by the runs "
                    "that use it (openai_agents.run(ctx, ..., session=LedgerSession(...)))"
                )
            items = await asyncio.to_thread(session_items, self.session_id)
            limit = arguments.get("limit")
            return items[-limit:] if limit else items

        def operate(**inputs: Any) -> Any:
            items = session_items(self.session_id)
            if op == "get":
                limit = inputs.get("limit")
                return items[-limit:] if limit else items
            if op == "pop":
                return items[-1] if items else None
            return {"op": op}

        bridge.sessions += 1
        step_id = f"{bridge.step}.session.{bridge.sessions}.{op}"
        recorded = SDKTool(name=f"session:{op}", kind="read", fn=operate)
        inputs = {"session_id": self.session_id, "op": op, **arguments}
        ctx = bridge.ctx
        return await bridge.ask(lambda: ctx.call(recorded, step=step_id, **inputs))


def transcript(run_id: str) -> list[dict[str, Any]]:
    """What was said in an OpenAI Agents run: one entry per message, from its model steps.

    Each entry is ``{"role", "text", "time", "step_id"}``: the user's input and each assistant
    message, tool call and handoff the model answered, in the ledger's order (``time`` is when
    the step finished). Read from the ledger, so it survives the worker that ran it.
    """
    from ledger.selectors.transcript import openai_agents_turns

    said: list[dict[str, Any]] = []
    # One query for the run: the adapter's own model steps, chosen by the database (a long run
    # of other model steps is not loaded to be skipped), each with the user messages its input
    # adds, not the whole input (which repeats the conversation so far).
    for row in openai_agents_turns(run_id):
        when = row["finished_at"].isoformat() if row["finished_at"] else None
        for content in row["users"]:
            said.append(_said("user", _text(content), when, row["step_id"]))
        for item in row["output"]:
            if item.get("type") == "message":
                said.append(_said("assistant", _text(item.get("content")), when, row["step_id"]))
            elif item.get("type") == "function_call":
                text = f"{item.get('name')}({item.get('arguments')})"
                said.append(_said("tool_call", text, when, row["step_id"]))
    return said


# --- the bridge between the SDK's event loop and the worker's thread ------------------------


class _Bridge(Bridge):
    """Runs the SDK on the worker's shared event loop (``ledger.adapters._bridge``; a call
    whose ledger work raised is given that error); runs ledger calls in this thread."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        step: str,
        max_workers: int = 4,
        effects: Mapping[str, Lookup | None] | None = None,
    ) -> None:
        super().__init__(name="runledger-openai-agents", hand_back=True)
        self.ctx = ctx
        self.step = step
        # (scope, call id) -> (model step, i, name): a sub-agent's answers may reuse call ids
        self.calls: dict[tuple[str, str], tuple[str, int, str]] = {}
        self.max_workers = max_workers
        self.effects = dict(effects or {})
        self.gather = Gather(self._dispatch)
        self.made: dict[int, Agent[Any]] = {}  # the author's agent's id -> its durable clone
        self.clones: set[int] = set()
        self.sessions = 0  # the session operations so far (their step ids)

    def run(self, start: Callable[[], Coroutine[Any, Any, Any]], agent: Agent[Any]) -> Any:
        return self.serve(_SCOPE_RUN(start, (self.step, [0]), self, agent), shared=True)

    def durable(self, agent: Agent[Any]) -> Agent[Any]:
        """The durable clone of ``agent`` (itself when it is one already)."""
        if id(agent) in self.clones:
            return agent
        clone = _durable_agent(agent, self, self.made)
        self.clones.update(id(a) for a in self.made.values())
        return clone

    def call_of(self, call_id: str) -> tuple[str, int, str]:
        """Where the model asked for tool call ``call_id`` (in the running scope's answers)."""
        prefix, _counter = _SCOPE.get()
        return self.calls[(prefix, call_id)]

    # the tool calls of one answer: gathered into one fan-out
    def answered(self, model_step: str, output: list[dict[str, Any]], durable: set[str]) -> None:
        """Number the answer's tool calls and expect its durable ones; an answer with a call
        whose arguments are not a JSON object is refused whole, before any of its calls runs."""
        calls = [o for o in output if o.get("type") == "function_call"]
        for call in calls:
            if call.get("name") in durable:
                _arguments(str(call.get("name")), str(call.get("arguments") or ""))
        prefix, _counter = _SCOPE.get()
        for i, call in enumerate(calls):
            where = (prefix, str(call.get("call_id")))
            self.calls[where] = (model_step, i, str(call.get("name")))
            if call.get("name") in durable:
                self.gather.expect(model_step, i)

    async def tool_call(self, model_step: str, index: int, call: _ToolCall) -> Any:
        """Hold ``call`` until the answer's other durable calls are here; run them as one
        fan-out (``run_calls``: steps ``<model step>.tools.<i>.<name>``, those behind an
        approval gate after it, one at a time); return this call's result."""
        return await self.gather.call(model_step, index, call)

    async def _dispatch(self, batch: list[Held]) -> dict[int, Any]:
        def run_batch() -> dict[int, Any]:
            return run_calls(
                self.ctx,
                batch,
                prefix=batch[0].answer,
                max_workers=self.max_workers,
                gated=lambda call: isinstance(call, _ToolCall) and call.gated,
                call_gated=self._call_gated,
            )

        return await self.ask(run_batch)  # type: ignore[no-any-return]

    def _call_gated(self, call: ToolCall, step: str) -> Any:
        """A ``needs_approval`` call behind runledger's gate. Rejected, the model is told as the
        SDK tells it (``Tool execution was not approved.``, its default rejection message) and
        the run goes on; a tool whose own ``@tool(approval=Approval(on_reject="fail"))`` says
        otherwise fails the run. A replay gives the model the same words (the rejection is
        replayed at the same call)."""
        from ledger.errors import ApprovalRejected

        own = None if call.tool.approval is not None else True  # the tool's own policy first
        try:
            return self.ctx.call(call.tool, step=step, approval=own, **call.arguments)
        except ApprovalRejected:
            return REJECTED


#: What the model is given for a call a person rejected: the SDK's own default
#: (``agents.tool.DEFAULT_APPROVAL_REJECTION_MESSAGE``).
REJECTED = "Tool execution was not approved."


@dataclasses.dataclass
class _ToolCall(ToolCall):
    """One durable tool call of an answer: the ledger tool, its arguments, its gate."""

    gated: bool = False


async def _SCOPE_RUN(
    start: Callable[[], Coroutine[Any, Any, Any]],
    scope: tuple[str, list[int]],
    bridge: _Bridge,
    agent: Agent[Any],
) -> Any:
    _SCOPE.set(scope)
    _ACTIVE.set(bridge)
    async with contextlib.AsyncExitStack() as servers:
        # The agents' MCP servers not yet connected are connected here, on the loop the SDK run
        # uses, and closed when it ends: a sync ledger agent cannot ``async with`` them itself.
        for server in _mcp_servers(agent):
            if getattr(server, "session", None) is None:
                await server.connect()
                servers.push_async_callback(server.cleanup)
        return await start()


def _mcp_servers(agent: Agent[Any]) -> list[Any]:
    found: dict[int, Any] = {}
    for each in _agents(agent):
        for server in each.mcp_servers:
            found.setdefault(id(server), server)
    return list(found.values())


# --- models ---------------------------------------------------------------------------------


class _Provider(ModelProvider):
    def __init__(self, base: ModelProvider | None, bridge: _Bridge) -> None:
        self._base = base
        self._bridge = bridge

    def get_model(self, model_name: str | None) -> Model:
        if self._base is None:
            from agents.models.multi_provider import MultiProvider

            self._base = MultiProvider()
        return _DurableModel(self._base.get_model(model_name), model_name or "", self._bridge)


class _DurableModel(Model):
    """Each ``get_response`` is a model step; its answer is stored and replayed."""

    def __init__(self, model: Model, name: str, bridge: _Bridge) -> None:
        self._model = model
        self._name = name
        self._bridge = bridge

    def _request(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        kwargs: dict[str, Any],
    ) -> tuple[str, dict[str, Any]]:
        """The next model step's id and its request (what its input hash covers)."""
        prefix, counter = _SCOPE.get()
        faultpoints.point("openai_agents.before_model")  # between two turns
        counter[0] += 1
        step_id = f"{prefix}.turn.{counter[0]}"
        request = {
            "adapter": "openai-agents",
            "model": self._name,
            "system": system_instructions,
            "input": _json(input),
            "settings": _json(model_settings.to_json_dict()),
            "tools": [_tool_definition(t) for t in tools],
            "handoffs": [
                {
                    "name": h.tool_name,
                    "description": h.tool_description,
                    "parameters": h.input_json_schema,
                }
                for h in handoffs
            ],
            "output_schema": output_schema.json_schema() if output_schema else None,
            "previous_response_id": kwargs.get("previous_response_id"),
            "conversation_id": kwargs.get("conversation_id"),
        }
        return step_id, request

    def _answered(self, step_id: str, answer: dict[str, Any], tools: list[Any]) -> None:
        durable = {
            t.name
            for t in tools
            if isinstance(t, FunctionTool) and not getattr(t, "_is_agent_tool", False)
        }
        self._bridge.answered(step_id, answer.get("output") or [], durable)

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        step_id, request = self._request(
            system_instructions, input, model_settings, tools, output_schema, handoffs, kwargs
        )

        def send(_request: dict[str, Any]) -> dict[str, Any]:
            response = self._bridge.on_loop(
                self._model.get_response(
                    system_instructions,
                    input,
                    model_settings,
                    tools,
                    output_schema,
                    handoffs,
                    tracing,
                    **kwargs,
                )
            )
            return _answer(response)

        ctx = self._bridge.ctx
        answer = await self._bridge.ask(
            lambda: ctx.model_request(request, send=send, model=self._name, step=step_id)
        )
        self._answered(step_id, answer, tools)
        return _response(answer)

    async def stream_response(  # type: ignore[override]
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> Any:
        """A streamed model call as one model step: while the answer is live its events are
        passed on as they come (the caller's stream), and the whole answer is recorded once the
        stream completes; a recorded answer is replayed whole, as one ``response.completed``
        event. The SDK builds the turn from that last event either way, so a live turn and its
        replay hand the next turn the same items."""
        step_id, request = self._request(
            system_instructions, input, model_settings, tools, output_schema, handoffs, kwargs
        )
        passed_on: asyncio.Queue[Any] = asyncio.Queue()

        async def stream() -> dict[str, Any]:
            completed: Any = None
            done_items: list[Any] = []
            async for event in self._model.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                **kwargs,
            ):
                if isinstance(event, ResponseCompletedEvent):
                    completed = event.response
                    continue  # the recorded answer's own completion is handed on below
                if isinstance(event, ResponseOutputItemDoneEvent):
                    done_items.append(event.item)
                elif isinstance(event, ResponseTextDeltaEvent):
                    live.delta(event.delta)  # the run's live readers (?live=true), never stored
                passed_on.put_nowait(event)
            if completed is None:
                raise sdk.ModelBehaviorError("the model's stream ended without a final response")
            output = list(completed.output or done_items)
            usage = completed.usage
            return _answer(
                ModelResponse(
                    output=output,
                    usage=Usage(
                        requests=1,
                        input_tokens=getattr(usage, "input_tokens", 0) or 0,
                        output_tokens=getattr(usage, "output_tokens", 0) or 0,
                        total_tokens=getattr(usage, "total_tokens", 0) or 0,
                    ),
                    response_id=completed.id,
                )
            )

        def send(_request: dict[str, Any]) -> dict[str, Any]:
            return self._bridge.on_loop(live.carry(stream)())  # type: ignore[arg-type,no-any-return]

        ctx = self._bridge.ctx
        recorded = asyncio.ensure_future(
            self._bridge.ask(
                lambda: ctx.model_request(request, send=send, model=self._name, step=step_id)
            )
        )
        while not recorded.done() or not passed_on.empty():
            getting = asyncio.ensure_future(passed_on.get())
            await asyncio.wait({getting, recorded}, return_when=asyncio.FIRST_COMPLETED)
            if getting.done():
                yield getting.result()
            else:
                getting.cancel()
        answer = recorded.result()
        self._answered(step_id, answer, tools)
        yield _completed(answer)


def _answer(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    return {
        "output": [item.model_dump(mode="json", exclude_none=True) for item in response.output],
        "usage": {
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        },
        "response_id": response.response_id,
    }


def _completed(answer: dict[str, Any]) -> ResponseCompletedEvent:
    """The stream's last event for a recorded answer: the SDK builds the turn from it."""
    usage = answer.get("usage") or {}
    response = Response.model_construct(
        id=answer.get("response_id") or "",
        object="response",
        created_at=0.0,
        model="",
        output=_OUTPUT.validate_python(answer.get("output") or []),
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        usage=ResponseUsage.model_construct(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            total_tokens=int(usage.get("total_tokens") or 0),
            input_tokens_details=InputTokensDetails.model_construct(cached_tokens=0),
            output_tokens_details=OutputTokensDetails.model_construct(reasoning_tokens=0),
        ),
    )
    return ResponseCompletedEvent.model_construct(
        type="response.completed", response=response, sequence_number=0
    )


def _response(answer: dict[str, Any]) -> ModelResponse:
    usage = answer.get("usage") or {}
    return ModelResponse(
        output=_OUTPUT.validate_python(answer.get("output") or []),
        usage=Usage(
            requests=int(usage.get("requests") or 1),
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            total_tokens=int(usage.get("total_tokens") or 0),
        ),
        response_id=answer.get("response_id"),
    )


# --- tools and guardrails -------------------------------------------------------------------


def _agents(agent: Agent[Any]) -> list[Agent[Any]]:
    """The agent graph: ``agent``, the agents it hands off to and uses as tools, and theirs."""
    seen: set[int] = set()
    found: list[Agent[Any]] = []
    pending: list[Agent[Any]] = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                owner = _agent_of_tool(tool)
                if owner is not None:
                    pending.append(owner)
        for h in current.handoffs:
            target = h if isinstance(h, Agent) else _handoff_target(h)
            if target is not None:
                pending.append(target)
    return found


def _function_tools(agent: Agent[Any]) -> list[FunctionTool]:
    return [t for each in _agents(agent) for t in each.tools if isinstance(t, FunctionTool)]


def _handoff_target(handoff: Any) -> Agent[Any] | None:
    ref = getattr(handoff, "_agent_ref", None)
    target = ref() if ref is not None else None
    return target if isinstance(target, Agent) else None


def _agent_of_tool(tool: FunctionTool) -> Agent[Any] | None:
    if not getattr(tool, "_is_agent_tool", False):
        return None
    owner = getattr(tool, "_agent_instance", None)
    return owner if isinstance(owner, Agent) else None


def _check_graph(agent: Agent[Any], effects: Mapping[str, Lookup | None]) -> None:
    for function in _function_tools(agent):
        if id(function) in _EFFECTS or getattr(function, "_is_agent_tool", False):
            if function.name in effects:
                raise AgentDefinitionError(
                    f"run(effects=...) names {function.name!r}, which is a runledger @tool or "
                    "an agent used as a tool: its kind is its own declaration"
                )
            continue
        if function.needs_approval is not False:
            raise AgentDefinitionError(
                f"tool {function.name!r} has needs_approval but is a plain SDK tool (a read): "
                "approval is runledger's gate on an effect; declare it "
                '@tool(kind="effect", reconcile=...) and hand it to the agent with '
                "ledger.adapters.openai_agents.function_tool(tool, needs_approval=True)"
            )


def _check_effects(effects: Any) -> dict[str, Lookup | None]:
    """``run(effects={tool name: lookup or None})``."""
    if effects is None:
        return {}
    if not isinstance(effects, Mapping):
        raise AgentDefinitionError(
            "run(effects=...) maps tool names to their lookups (or None), e.g. "
            f'effects={{"refund_charge": find_refund}}, not {effects!r}'
        )
    for name, lookup in effects.items():
        if not isinstance(name, str) or not name:
            raise AgentDefinitionError(f"run(effects=...) keys are tool names, not {name!r}")
        if lookup is not None and not callable(lookup):
            raise AgentDefinitionError(
                f"run(effects={{{name!r}: ...}}) takes a lookup function of the effect key "
                f"(or None: a crash inside it stops the run for a person), not {lookup!r}"
            )
    return dict(effects)


def _durable_agent(agent: Agent[Any], bridge: _Bridge, made: dict[int, Agent[Any]]) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents it hands off to) whose function tools, MCP
    servers' tools and guardrails go through the ledger; the caller's agents are left as they
    are. An agent used as a tool is cloned when its ``Runner`` run starts (``_LedgerRunner``)."""
    if id(agent) in made:
        return made[id(agent)]
    if isinstance(agent.model, Model):
        raise AgentDefinitionError(
            f"agent {agent.name!r} holds a Model object: give it a model name and pass "
            "model_provider= to run() so each model call can be a step"
        )
    clone = agent.clone()
    made[id(agent)] = clone
    clone.tools = [_durable_tool(t, bridge) for t in agent.tools]
    clone.input_guardrails = [
        _durable_guard(g, bridge, "input", agent) for g in agent.input_guardrails
    ]
    clone.output_guardrails = [
        _durable_guard(g, bridge, "output", agent) for g in agent.output_guardrails
    ]
    clone.handoffs = [
        _durable_agent(h, bridge, made)
        if isinstance(h, Agent)
        else _durable_handoff(h, bridge, made)
        for h in agent.handoffs
    ]
    if agent.mcp_servers:
        mcp_tools = agent.get_mcp_tools

        async def durable_mcp_tools(run_context: Any) -> list[Any]:
            # The servers' tools, listed each turn as the SDK lists them (their definitions are
            # in the model step's hash); each call of one is a step like a function tool's.
            return [_durable_tool(t, bridge) for t in await mcp_tools(run_context)]

        object.__setattr__(clone, "get_mcp_tools", durable_mcp_tools)
    return clone


def _durable_handoff(handoff: Any, bridge: _Bridge, made: dict[int, Agent[Any]]) -> Any:
    """A ``handoff(...)`` object whose target agent is made durable when it is handed to."""
    original = handoff.on_invoke_handoff

    async def invoke(run_ctx: Any, arguments: str) -> Agent[Any]:
        return _durable_agent(await original(run_ctx, arguments), bridge, made)

    return dataclasses.replace(handoff, on_invoke_handoff=invoke)


def _read_tool(function: FunctionTool) -> SDKTool:
    def not_here(**_arguments: Any) -> Any:  # replaced per call by the SDK tool's own function
        raise AgentDefinitionError(f"tool {function.name!r} runs only inside its SDK agent")

    return SDKTool(
        name=function.name,
        kind="read",
        fn=not_here,
        retries=0,
        description=function.description,
        sdk_schema=canonical.dumps(function.params_json_schema),
    )


def _durable_tool(tool: Any, bridge: _Bridge) -> Any:
    if not isinstance(tool, FunctionTool):
        return tool  # hosted tools run at the provider: the model step records their output
    if getattr(tool, "_is_agent_tool", False):
        return dataclasses.replace(tool, on_invoke_tool=_nested(tool, bridge))
    declared = _EFFECTS.get(id(tool))
    effect = declared[1] if declared else None
    named = effect is None and tool.name in bridge.effects
    base = effect or _read_tool(tool)
    if named:
        base = _named_effect(tool, bridge.effects[tool.name])

    async def invoke(tool_ctx: Any, arguments: str) -> Any:
        model_step, index, _name = bridge.call_of(tool_ctx.tool_call_id)
        parsed = _arguments(tool.name, arguments)
        if effect is not None:
            call = _ToolCall(effect, parsed, gated=tool.needs_approval is not False)
        else:

            def run_sdk(
                *, idempotency_key: str | None = None, fencing_token: int | None = None, **_: Any
            ) -> Any:
                async def invoked() -> Any:
                    marked = _EFFECT.set((idempotency_key, fencing_token)) if named else None
                    try:
                        return await _awaited(tool.on_invoke_tool(tool_ctx, arguments))
                    finally:
                        if marked is not None:
                            _EFFECT.reset(marked)

                return _checked(tool.name, bridge.on_loop(invoked()))

            call = _ToolCall(dataclasses.replace(base, fn=run_sdk), parsed, gated=False)
        result = await bridge.tool_call(model_step, index, call)
        # What the model is given back: a text as it is, anything else as canonical JSON (the
        # SDK would hand back its Python repr), so a replay gives the next turn the same bytes.
        return result if isinstance(result, str) else canonical.dumps(result)

    return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=False)


def _named_effect(function: FunctionTool, lookup: Lookup | None) -> SDKTool:
    """An SDK tool that ``run(effects=...)`` names, as the ledger sees it: an effect whose
    reconcile is the author's lookup of the effect key."""
    read = _read_tool(function)
    return dataclasses.replace(
        read,
        kind="effect",
        reconcile=lookup,
        takes_fencing_token=True,
        reconcile_takes_fencing_token=_takes_fencing_token(lookup),
    )


def _takes_fencing_token(fn: Callable[..., Any] | None) -> bool:
    if fn is None:
        return False
    try:
        return "fencing_token" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _nested(tool: FunctionTool, bridge: _Bridge) -> Any:
    """An agent used as a tool: its model calls and tools are steps under this call's id (its
    ``Runner`` run is given the agent's durable clone by ``_LedgerRunner``)."""
    original = tool.on_invoke_tool

    async def invoke(tool_ctx: Any, arguments: str) -> Any:
        model_step, index, _name = bridge.call_of(tool_ctx.tool_call_id)
        token = _SCOPE.set((f"{model_step}.tools.{index}.{tool.name}", [0]))
        try:
            return await original(tool_ctx, arguments)
        finally:
            _SCOPE.reset(token)

    return invoke


def _durable_guard(guard: Any, bridge: _Bridge, where: str, agent: Agent[Any]) -> Any:
    original = guard.guardrail_function
    name = guard.get_name() if hasattr(guard, "get_name") else getattr(guard, "name", "guardrail")
    prefix, _counter = _SCOPE.get((bridge.step, [0]))
    step_id = f"{prefix}.guardrail.{where}.{agent.name}.{name}"
    record = SDKTool(name=f"guardrail:{name}", kind="read", fn=lambda: None)

    async def check(*args: Any) -> GuardrailFunctionOutput:
        def evaluate() -> dict[str, Any]:
            out = original(*args)
            if asyncio.iscoroutine(out):
                out = bridge.on_loop(out)
            return {"tripwire": bool(out.tripwire_triggered), "info": _json(out.output_info)}

        recorded = dataclasses.replace(record, fn=evaluate)
        ctx = bridge.ctx
        stored = await bridge.ask(lambda: ctx.call(recorded, step=step_id))
        return GuardrailFunctionOutput(
            output_info=stored["info"], tripwire_triggered=stored["tripwire"]
        )

    kind = InputGuardrail if where == "input" else OutputGuardrail
    return kind(guardrail_function=check, name=name)  # type: ignore[arg-type]


async def _awaited(value: Any) -> Any:
    return await value


# --- values ---------------------------------------------------------------------------------


def _arguments(name: str, arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise sdk.ModelBehaviorError(
            f"tool {name!r}: the model's arguments are not JSON ({exc})"
        ) from exc
    if not isinstance(parsed, dict):
        raise sdk.ModelBehaviorError(f"tool {name!r}: the model's arguments are not an object")
    return parsed


def _checked(name: str, value: Any) -> Any:
    try:
        return canonical.normalize(_json(value), step_id=name)
    except (TypeError, ValueError) as exc:
        raise AgentDefinitionError(
            f"tool {name!r} returned {type(value).__name__}, which is not JSON: return a "
            f"string, number, list or dict (or a pydantic model) ({exc})"
        ) from exc


def _tool_definition(tool: Any) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.params_json_schema,
            "strict": tool.strict_json_schema,
        }
    return {"name": getattr(tool, "name", type(tool).__name__), "type": type(tool).__name__}


def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json(dataclasses.asdict(value))
    return value


def _said(role: str, text: str, when: str | None, step_id: str) -> dict[str, Any]:
    return {"role": role, "text": text, "time": when, "step_id": step_id}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


register_transcript("openai-agents", transcript)
