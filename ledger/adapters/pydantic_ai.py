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
  kind: a read, or an effect with its intent row, its idempotency key and its reconcile (a
  started effect without one stops the run for a person); ``approval=`` gates apply as they do
  to ``ctx.call``;
- structured output, output validation and ``ModelRetry`` retries are PydanticAI's own: they
  depend only on the stored answers, so a resume takes the same path.

PydanticAI is async and the ledger's steps are not: the agent runs on an event loop in a
thread of its own, and every model request and tool call crosses to the calling thread (which
holds the run's database connection and the ledger context) as one job.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ledger import canonical, faultpoints
from ledger.adapters import register_transcript
from ledger.engine import RunContext
from ledger.errors import AgentDefinitionError
from ledger.registry import Tool
from ledger.schemas import HIDDEN_PARAMS

SUPPORTED = (2, 3)  # pydantic-ai >= 2, < 3

#: Keys left out of the hashed request: they change on every run of the same conversation
#: (clock readings, PydanticAI's per-run ids), not what the model is asked.
VOLATILE = frozenset({"timestamp", "run_id", "conversation_id", "provider_response_id"})


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


@dataclass
class _Job:
    run: Callable[[], Any]  # runs on the run's thread (the ledger call)
    done: Future[Any] = field(default_factory=Future)


class _Stop(Exception):
    """Ends the agent's event loop when the run's thread raised (the run stops or fails)."""


class Bridge:
    """Hands the agent's model requests and tool calls to the thread that runs the ledger."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def ask(self, run: Callable[[], Any]) -> Any:
        job = _Job(run)
        self.jobs.put(job)
        return await asyncio.wrap_future(job.done)

    def on_loop(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the agent's event loop from the run's thread; wait for its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def serve(self, main: Coroutine[Any, Any, Any]) -> Any:
        """Run ``main`` on a new event loop in a thread; serve its jobs here until it ends."""
        outcome: dict[str, Any] = {}

        def agent_thread() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                outcome["value"] = loop.run_until_complete(main)
            except BaseException as exc:
                outcome["error"] = exc
            finally:
                self.jobs.put(None)
                loop.close()

        thread = threading.Thread(target=agent_thread, name="pydantic-ai-agent", daemon=True)
        thread.start()
        raised: BaseException | None = None
        while True:
            job = self.jobs.get()
            if job is None:
                break
            if not job.done.set_running_or_notify_cancel():
                continue  # the agent gave the call up (a sibling failed): nothing was run
            if raised is not None:
                job.done.set_exception(_Stop())
                continue
            try:
                job.done.set_result(job.run())
            except BaseException as exc:
                raised = exc
                job.done.set_exception(_Stop())
        thread.join()
        if raised is not None:
            raise raised
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]


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
        names = set(inspect.signature(tool.fn).parameters)
        if tool.kind == "effect" and "idempotency_key" not in names:
            raise AgentDefinitionError(
                f"effect tool {tool.name!r} has no idempotency_key parameter: add a keyword "
                "parameter idempotency_key and pass it to the service, so a retried call is "
                "the same call"
            )


def ledger_toolset(ctx: RunContext, tools: Sequence[Tool], bridge: Bridge, turns: Turns) -> Any:
    """A PydanticAI toolset of the ledger ``tools``: each call is the tool's ledger step."""
    from pydantic_ai import ModelRetry
    from pydantic_ai.tools import Tool as PydanticTool
    from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

    by_name = {t.name: t for t in tools}
    functions = FunctionToolset(
        [
            PydanticTool.from_schema(
                t.fn, name=t.name, description=t.description or None, json_schema=t.parameters()
            )
            for t in tools
        ]
    )

    class LedgerToolset(WrapperToolset[Any]):
        async def call_tool(
            self, name: str, tool_args: dict[str, Any], run_ctx: Any, tool: Any
        ) -> Any:
            ours = by_name[name]
            signature = inspect.signature(ours.fn)
            unknown = set(tool_args) - set(_visible(ours))
            if unknown:
                raise ModelRetry(f"{', '.join(sorted(unknown))} is not a parameter of {name}")
            try:
                signature.bind(
                    **tool_args, **dict.fromkeys(HIDDEN_PARAMS & set(signature.parameters))
                )
            except TypeError as exc:
                raise ModelRetry(f"{name}: {exc}") from exc
            turn, index = turns.calls.get(run_ctx.tool_call_id, (turns.n, 0))
            step = f"turn.{turn}.tools.{index}.{name}"[:200]
            return await bridge.ask(lambda: ctx.call(ours, step=step, **tool_args))

    return LedgerToolset(functions)


# --- the author's call -------------------------------------------------------------------------


def run_agent(
    ctx: RunContext,
    agent: Any,
    prompt: str,
    *,
    tools: Sequence[Tool] = (),
    step: str = "agent",
    **run_kwargs: Any,
) -> Any:
    """Run the PydanticAI ``agent`` on ``prompt`` durably inside a ledger agent; its output.

    ``tools`` are the ledger ``@tool`` functions the agent may call (also listed in the ledger
    agent's ``tools=``, so they are in its tool-schema hash). ``run_kwargs`` go to
    ``Agent.run`` (``output_type``, ``deps``, ``model_settings``, ``usage_limits``…). A
    structured output (a pydantic model) is returned as its JSON data.
    """
    _framework()
    check_tools(tools)
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
    toolset = ledger_toolset(ctx, tools, bridge, turns)

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
