"""Durable PydanticAI agents (optional extra: ``runledger[pydantic-ai]``).

    from pydantic_ai import Agent as PydanticAgent
    from ledger.adapters.pydantic_ai import run_agent

    helper = PydanticAgent("openai:gpt-5", instructions="You settle refunds.")

    @agent("refund-pai", tools=[lookup_order, refund])
    def refund_pai(ctx, inputs):
        return run_agent(ctx, helper, inputs["message"], tools=[lookup_order, refund])

The extension point is PydanticAI's own, as its durable-execution integrations use it: the
agent runs with a wrapped model (``LedgerModel``, a ``WrapperModel``) and a toolset of the
author's ``@tool`` functions (``LedgerToolset``):

- each model request is a model step ``<step>.turn.<n>``, its input hash over the whole request
  (model name, messages, settings, request parameters with the tool definitions); the stored
  ``ModelResponse`` is replayed on resume, never asked again;
- each tool call is the ledger step ``<step>.turn.<n>.tools.<i>.<tool>`` of the tool's declared
  kind (``i``: its place in the stored answer): a read, or an effect with its intent row, its
  idempotency key and its reconcile (a started effect without one stops the run for a person);
- the tool calls of one answer run as one ``ctx.parallel`` fan-out: PydanticAI validates them
  all, then starts them as concurrent tasks; the toolset holds each (``ledger.adapters._gather``)
  until every call the validation let through has arrived, and hands them to the run's thread
  at once. Calls that require approval (``requires_approval=``, ``@tool(approval=...)``) follow
  the fan-out one at a time, each behind runledger's approval gate; a rejection is PydanticAI's
  denial (``ToolDenied``), handed to the model;
- streaming is refused: a model step stores one whole answer;
- structured output, output validation and ``ModelRetry`` retries are PydanticAI's own: they
  depend only on the stored answers, so a resume takes the same path.

PydanticAI is async and the ledger's steps are not: the agent runs on an event loop in a
thread of its own, and every model request and tool call crosses to the calling thread (which
holds the run's database connection and the ledger context) as one job.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ledger import canonical, faultpoints
from ledger.adapters import _bridge, register_transcript
from ledger.engine import RunContext
from ledger.errors import AgentDefinitionError
from ledger.registry import Tool, require_idempotency_key
from ledger.schemas import HIDDEN_PARAMS

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


# --- the bridge between the agent's event loop and the run's thread ----------------------------


class Bridge(_bridge.Bridge):
    """Hands the agent's model requests and tool calls to the thread that runs the ledger
    (``ledger.adapters._bridge``; a call whose ledger work raised is told ``Stopped``)."""

    def __init__(self) -> None:
        super().__init__(name="pydantic-ai-agent")


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

    def __init__(self) -> None:
        self.n = 0
        self.calls: dict[str, tuple[int, int]] = {}


@functools.cache
def _adapters() -> tuple[Any, Any]:
    """PydanticAI's request parameters and response as JSON (built once: ~0.2 s each time)."""
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models import ModelRequestParameters

    return TypeAdapter(ModelRequestParameters), TypeAdapter(ModelResponse)


def ledger_model(ctx: RunContext, wrapped: Any, bridge: Bridge, turns: Turns) -> Any:
    """``wrapped`` (a PydanticAI ``Model``) whose requests are the run's model steps."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ToolCallPart
    from pydantic_ai.models.wrapper import WrapperModel

    params_adapter, response_adapter = _adapters()

    class LedgerModel(WrapperModel):
        async def request(  # type: ignore[override]
            self, messages: list[Any], model_settings: Any, model_request_parameters: Any
        ) -> Any:
            turns.n += 1
            turn = turns.n
            request = {
                "model": f"{self.wrapped.system}:{self.wrapped.model_name}",
                "messages": _plain(ModelMessagesTypeAdapter.dump_python(messages, mode="json")),
                "settings": _plain(dict(model_settings or {})),
                "parameters": _plain(
                    params_adapter.dump_python(model_request_parameters, mode="json")
                ),
            }

            def send(_data: dict[str, Any]) -> dict[str, Any]:
                response = bridge.on_loop(
                    self.wrapped.request(messages, model_settings, model_request_parameters)
                )
                return {"response": response_adapter.dump_python(response, mode="json")}

            def step() -> Any:
                faultpoints.point("pydantic_ai.before_request")  # between two turns
                return ctx.model_request(
                    request, send=send, model=request["model"], step=f"turn.{turn}"
                )

            answer = await bridge.ask(step)
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


def check_approvals(tools: Sequence[Tool], requires_approval: Any) -> Approver:
    """``run_agent(requires_approval=...)`` as a function of (tool name, arguments): tool names
    or ``@tool``s (every call), or a function deciding per call (as PydanticAI's
    ``ApprovalRequiredToolset`` does). Refused for tools that are not effects: runledger's
    approval gate stands before an effect's intent row."""
    if callable(requires_approval) and not isinstance(requires_approval, Tool):
        decide = requires_approval
        effects = {t.name for t in tools if t.kind == "effect"}
        return lambda name, args: name in effects and bool(decide(name, args))
    named = {t.name if isinstance(t, Tool) else str(t) for t in requires_approval or ()}
    kinds = {t.name: t.kind for t in tools}
    for name in sorted(named):
        if name not in kinds:
            raise AgentDefinitionError(
                f"requires_approval names {name!r}, which is not one of run_agent's tools"
            )
        if kinds[name] != "effect":
            raise AgentDefinitionError(
                f"tool {name!r} requires approval but is a {kinds[name]}: runledger's approval "
                'gate stands before an effect; declare it @tool(kind="effect", reconcile=...)'
            )
    return lambda name, _args: name in named


def ledger_toolset(
    ctx: RunContext,
    tools: Sequence[Tool],
    bridge: Bridge,
    turns: Turns,
    *,
    approver: Approver = lambda _name, _args: False,
    max_workers: int = 4,
) -> Any:
    """A PydanticAI toolset of the ledger ``tools``. The calls of one model answer are gathered
    (``ledger.adapters._gather``) and run as one ``ctx.parallel`` fan-out, each call the tool's
    ledger step ``turn.<n>.tools.<i>.<tool>``; calls that need approval follow, one at a time."""
    from pydantic_ai import ModelRetry, ToolDenied
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

    from ledger.adapters._gather import Gather, Held, ToolCall, run_calls
    from ledger.errors import ApprovalRejected

    by_name = {t.name: t for t in tools}

    def where(tool_call_id: str | None) -> tuple[int, int]:
        return turns.calls.get(tool_call_id or "", (turns.n, 0))

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
            turn, index = where(run_ctx.tool_call_id)
            gather.expect(str(turn), index)  # valid: PydanticAI will run it

        return validate

    def call_gated(call: ToolCall, step: str) -> Any:
        own = None if call.tool.approval is not None else True  # the tool's own policy first
        try:
            return ctx.call(call.tool, step=step[:200], approval=own, **call.arguments)
        except ApprovalRejected as exc:  # PydanticAI's denial path: the model is told
            return ToolDenied(f"The tool call was denied: {exc}")

    def run_batch(batch: list[Held]) -> dict[int, Any]:
        """On the run's thread: the batch as one fan-out, then the gated calls in order."""
        return run_calls(
            ctx,
            batch,
            prefix=f"turn.{batch[0].answer}",
            max_workers=max_workers,
            gated=lambda call: approver(call.tool.name, call.arguments),
            call_gated=call_gated,
        )

    async def dispatch(batch: list[Held]) -> dict[int, Any]:
        return await bridge.ask(lambda: run_batch(batch))  # type: ignore[no-any-return]

    gather = Gather(dispatch)
    functions = FunctionToolset(
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

    class LedgerToolset(WrapperToolset[Any]):
        async def call_tool(
            self, name: str, tool_args: dict[str, Any], run_ctx: Any, tool: Any
        ) -> Any:
            turn, index = where(run_ctx.tool_call_id)
            return await gather.call(str(turn), index, ToolCall(by_name[name], dict(tool_args)))

    return LedgerToolset(functions)


# --- the author's call -------------------------------------------------------------------------


def run_agent(
    ctx: RunContext,
    agent: Any,
    prompt: str,
    *,
    tools: Sequence[Tool] = (),
    step: str = "agent",
    requires_approval: Sequence[Tool | str] | Approver = (),
    max_workers: int = 4,
    **run_kwargs: Any,
) -> Any:
    """Run the PydanticAI ``agent`` on ``prompt`` durably inside a ledger agent; its output.

    ``tools`` are the ledger ``@tool`` functions the agent may call (also listed in the ledger
    agent's ``tools=``, so they are in its tool-schema hash). The tool calls of one model
    answer run as one fan-out of at most ``max_workers`` at once. ``requires_approval`` (tool
    names or tools, or a function of the tool's name and arguments) puts those effects' calls
    behind runledger's approval gate, as ``@tool(approval=...)`` does; a rejection is
    PydanticAI's denial (``ToolDenied``), handed to the model. ``run_kwargs`` go to
    ``Agent.run`` (``output_type``, ``deps``, ``model_settings``, ``usage_limits``…). A
    structured output (a pydantic model) is returned as its JSON data.
    """
    _framework()
    check_tools(tools)
    if max_workers < 1:
        raise AgentDefinitionError("run_agent(max_workers=...) must be at least 1")
    if run_kwargs.get("event_stream_handler") is not None:
        raise AgentDefinitionError(STREAMING)
    named = check_approvals(tools, requires_approval)

    def approver(name: str, args: dict[str, Any]) -> bool:
        tool = next(t for t in tools if t.name == name)
        return tool.approval is not None or named(name, args)

    from pydantic_ai.toolsets import FunctionToolset

    others = sorted(
        {type(ts).__name__ for ts in agent.toolsets if not isinstance(ts, FunctionToolset)}
    )
    if others:
        raise AgentDefinitionError(
            f"PydanticAI agent has toolsets of its own ({', '.join(others)}) whose calls would "
            "run outside the ledger (an external tool's call outside the run altogether): "
            "declare the tools with ledger @tool and pass them as run_agent(tools=...)"
        )
    own = [name for ts in agent.toolsets for name in getattr(ts, "tools", {})]
    if own:
        raise AgentDefinitionError(
            f"PydanticAI agent has tools of its own ({', '.join(sorted(own))}) that would run "
            "outside the ledger: declare them with ledger @tool and pass them as "
            "run_agent(tools=...)"
        )
    if agent.model is None and "model" not in run_kwargs:
        raise AgentDefinitionError("the PydanticAI agent has no model: give it one")
    from pydantic_ai.models import infer_model

    bridge = Bridge()
    turns = Turns()
    model = ledger_model(ctx, infer_model(run_kwargs.pop("model", agent.model)), bridge, turns)
    toolset = ledger_toolset(ctx, tools, bridge, turns, approver=approver, max_workers=max_workers)

    async def main() -> Any:
        return await agent.run(prompt, model=model, toolsets=[toolset], **run_kwargs)

    with ctx.scope(step):
        result = bridge.serve(main())
    output = result.output
    if hasattr(output, "model_dump"):
        return output.model_dump(mode="json")
    return canonical.normalize(output, step_id=f"{step}.output")


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
