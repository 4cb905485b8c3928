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
import contextvars
import dataclasses
import json
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from ledger import canonical, faultpoints
from ledger.adapters import register_transcript
from ledger.adapters._bridge import Bridge
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
    from agents.usage import Usage
    from openai.types.responses import ResponseOutputItem
    from pydantic import BaseModel, TypeAdapter
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "ledger.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'runledger[openai-agents]'"
    ) from exc

STREAMING = (
    "Runner.run_streamed is not durable under runledger: a model step stores one whole "
    "answer, and a replay could not give back the events a stream would have; use "
    "ledger.adapters.openai_agents.run"
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


def ledger_tools(agent: Agent[Any]) -> list[Tool]:
    """The runledger tools of an SDK agent graph (its tools, its handoffs' and its
    agents-as-tools' tools), for ``@agent(tools=...)``: the run's tool-schema hash then covers
    the SDK's tool definitions, so a changed tool is a schema change on resume."""
    found: dict[str, Tool] = {}
    for function in _function_tools(agent):
        if id(function) in _EFFECTS:
            found[function.name] = _EFFECTS[id(function)][1]
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
    **runner_kwargs: Any,
) -> Any:
    """Run ``agent`` with the SDK's ``Runner`` durably; returns the SDK's ``RunResult``.

    ``model_provider`` resolves the agents' model names (the SDK's OpenAI provider when
    omitted); an agent whose ``model`` is a ``Model`` object is refused: give it a name.
    The function-tool calls of one model answer run as one fan-out of at most ``max_workers``
    at once. ``runner_kwargs`` go to ``Runner.run`` (``max_turns``, ``context``, ...).
    """
    config = run_config or RunConfig()
    base = model_provider or config.model_provider
    _check_graph(agent)
    if max_workers < 1:
        raise AgentDefinitionError("run(max_workers=...) must be at least 1")
    bridge = _Bridge(ctx, step=step, max_workers=max_workers)
    config = dataclasses.replace(config, model_provider=_Provider(base, bridge))
    durable = _durable_agent(agent, bridge, {})
    return bridge.run(lambda: Runner.run(durable, input, run_config=config, **runner_kwargs))


def run_streamed(*_args: Any, **_kwargs: Any) -> NoReturn:
    """Refused: ``Runner.run_streamed`` is not durable under runledger (use ``run``)."""
    raise AgentDefinitionError(STREAMING)


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

    def __init__(self, ctx: RunContext, *, step: str, max_workers: int = 4) -> None:
        super().__init__(name="runledger-openai-agents", hand_back=True)
        self.ctx = ctx
        self.step = step
        self.calls: dict[str, tuple[str, int, str]] = {}  # call id -> (model step, i, name)
        self.max_workers = max_workers
        self.gather = Gather(self._dispatch)

    def run(self, start: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return self.serve(_SCOPE_RUN(start, (self.step, [0])), shared=True)

    # the tool calls of one answer: gathered into one fan-out
    def answered(self, model_step: str, output: list[dict[str, Any]], durable: set[str]) -> None:
        """Number the answer's tool calls and expect its durable ones; an answer with a call
        whose arguments are not a JSON object is refused whole, before any of its calls runs."""
        calls = [o for o in output if o.get("type") == "function_call"]
        for call in calls:
            if call.get("name") in durable:
                _arguments(str(call.get("name")), str(call.get("arguments") or ""))
        for i, call in enumerate(calls):
            self.calls[str(call.get("call_id"))] = (model_step, i, str(call.get("name")))
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
    start: Callable[[], Coroutine[Any, Any, Any]], scope: tuple[str, list[int]]
) -> Any:
    _SCOPE.set(scope)
    return await start()


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
        prefix, counter = _SCOPE.get()
        faultpoints.point("openai_agents.before_model")  # between two turns
        counter[0] += 1
        local = f"turn.{counter[0]}"
        step_id = f"{prefix}.{local}"
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
        durable = {
            t.name
            for t in tools
            if isinstance(t, FunctionTool) and not getattr(t, "_is_agent_tool", False)
        }
        self._bridge.answered(step_id, answer.get("output") or [], durable)
        return _response(answer)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise AgentDefinitionError(STREAMING)


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


def _function_tools(agent: Agent[Any]) -> list[FunctionTool]:
    seen: set[int] = set()
    found: list[FunctionTool] = []
    pending: list[Agent[Any]] = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for tool in current.tools:
            if isinstance(tool, FunctionTool):
                found.append(tool)
                owner = _agent_of_tool(tool)
                if owner is not None:
                    pending.append(owner)
        for h in current.handoffs:
            target = h if isinstance(h, Agent) else _handoff_target(h)
            if target is not None:
                pending.append(target)
    return found


def _handoff_target(handoff: Any) -> Agent[Any] | None:
    ref = getattr(handoff, "_agent_ref", None)
    target = ref() if ref is not None else None
    return target if isinstance(target, Agent) else None


def _agent_of_tool(tool: FunctionTool) -> Agent[Any] | None:
    if not getattr(tool, "_is_agent_tool", False):
        return None
    owner = getattr(tool, "_agent_instance", None)
    return owner if isinstance(owner, Agent) else None


def _check_graph(agent: Agent[Any]) -> None:
    for function in _function_tools(agent):
        if id(function) in _EFFECTS or getattr(function, "_is_agent_tool", False):
            continue
        if function.needs_approval is not False:
            raise AgentDefinitionError(
                f"tool {function.name!r} has needs_approval but is a plain SDK tool (a read): "
                "approval is runledger's gate on an effect; declare it "
                '@tool(kind="effect", reconcile=...) and hand it to the agent with '
                "ledger.adapters.openai_agents.function_tool(tool, needs_approval=True)"
            )


def _durable_agent(agent: Agent[Any], bridge: _Bridge, made: dict[int, Agent[Any]]) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents it hands off to) whose function tools and
    guardrails go through the ledger; the caller's agents are left as they are."""
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
    base = effect or _read_tool(tool)

    async def invoke(tool_ctx: Any, arguments: str) -> Any:
        model_step, index, _name = bridge.calls[tool_ctx.tool_call_id]
        parsed = _arguments(tool.name, arguments)
        if effect is not None:
            call = _ToolCall(effect, parsed, gated=tool.needs_approval is not False)
        else:

            def run_sdk(**_inputs: Any) -> Any:
                answer = tool.on_invoke_tool(tool_ctx, arguments)
                return _checked(tool.name, bridge.on_loop(_awaited(answer)))

            call = _ToolCall(dataclasses.replace(base, fn=run_sdk), parsed, gated=False)
        result = await bridge.tool_call(model_step, index, call)
        # What the model is given back: a text as it is, anything else as canonical JSON (the
        # SDK would hand back its Python repr), so a replay gives the next turn the same bytes.
        return result if isinstance(result, str) else canonical.dumps(result)

    return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=False)


def _nested(tool: FunctionTool, bridge: _Bridge) -> Any:
    """An agent used as a tool: its model calls and tools are steps under this call's id."""
    original = tool.on_invoke_tool

    async def invoke(tool_ctx: Any, arguments: str) -> Any:
        model_step, index, _name = bridge.calls[tool_ctx.tool_call_id]
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
