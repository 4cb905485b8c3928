"""Durable LangGraph graphs (optional extra: ``runledger[langgraph]``).

    from langgraph.graph import StateGraph, MessagesState, START
    from langgraph.prebuilt import ToolNode, tools_condition
    from ledger.adapters.langgraph import effect_key, run_graph

    graph = builder.compile()            # the graph as LangGraph's docs build it

    @agent("refund-graph")
    async def refund_graph(ctx, inputs):
        return await run_graph(ctx, graph, {"messages": [("user", inputs["message"])]},
                               effects={"refund": find_refund})

``run_graph`` runs the compiled graph with ``graph.ainvoke`` as a coroutine on the worker's event
loop, inside an ``async def`` ledger agent, and every piece of I/O the graph does through
LangChain becomes a ledger step:

- each chat-model call inside a node (any LangChain ``BaseChatModel``: ``model.invoke``,
  ``ainvoke``, ``bind_tools(...).invoke``, in a sync or an async node) is a model step
  ``<step>.<superstep>.<node>.model.<k>``, its input hash over the model's class and name, the
  messages (without the ids LangGraph makes up) and the call's arguments (the bound tools'
  schemas); the answer (LangChain's ``ChatResult``) is stored and replayed, never asked again;
- each tool call of a ``ToolNode`` is the step ``<step>.<superstep>.<node>.tools.<i>.<tool>``
  (``i``: its place in the model's answer), the calls of one answer one ``ctx.parallel``
  fan-out: a read, or an effect when ``effects=`` names the tool (its lookup the reconcile,
  ``effect_key()`` its key inside the tool). The step's result is the ``ToolMessage`` the node
  hands on, so a replay hands on the same message;
- ``interrupt()`` in a node stops the run for a person: ``ctx.ask`` with the interrupt's value
  as the question (reason ``question``); the person's answer is recorded and resumes the graph
  with ``Command(resume=answer)``;
- the graph's checkpoints are written to runledger's database (``RunledgerSaver``, bound to the
  run and fenced by its lease), thread ``<run id>/<step>``; the run page lists them.

How the hooks attach, and why: LangChain's callback handlers see a model call but cannot
replace its answer, and a compiled graph has no hook around the model a node closes over, so
the adapter wraps LangChain's own short-circuit point — ``BaseChatModel._agenerate_with_cache``
and ``_generate_with_cache``, where LangChain answers a call from its cache without asking the
model — and ``ToolNode``'s per-call runner (``_arun_one``, the call its ``awrap_tool_call``
wraps), both only while ``run_graph`` drives a graph (a context variable; other code in the
process is untouched). The graph is the author's, unchanged.

A resume re-executes the ledger agent from the top, as for any agent: the graph runs again from
its input, every model answer and tool result replays from the ledger, and the thread's
checkpoints are written again (the old ones are deleted first). The ledger, not a checkpoint,
decides what runs: a checkpoint is written after a step's row, so resuming from one could only
skip rows the ledger must walk.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger import canonical, faultpoints
from ledger.adapters import register_transcript
from ledger.adapters._effect import CurrentEffect
from ledger.engine import RunContext
from ledger.errors import AgentDefinitionError
from ledger.registry import Tool

if TYPE_CHECKING:
    from ledger.adapters._gather import Held

#: An effect's lookup: did the call with this key happen? (its result, or NOT_HAPPENED / None)
Lookup = Callable[..., Any]

SUPPORTED = (1, 2)  # langgraph >= 1, < 2

STREAMING = (
    "streaming a chat model inside a node is not durable under runledger: a model step stores "
    "one whole answer; call model.invoke / model.ainvoke in the node (run_graph records it)"
)
DIRECT = (
    "LangGraph graph was run with {how} directly inside runledger run {run_id}: its model calls "
    "and tool calls would not be steps, so a resume would ask the model again and run every tool "
    "again. Run it with `await ledger.adapters.langgraph.run_graph(ctx, graph, inputs, ...)` in "
    "an async def ledger agent"
)


def _framework() -> Any:
    try:
        import langgraph.version
    except ImportError as exc:  # pragma: no cover - the extra is installed in the dev venv
        raise AgentDefinitionError(
            "ledger.adapters.langgraph needs LangGraph: pip install 'runledger[langgraph]'"
        ) from exc
    check_version(langgraph.version.__version__)
    return langgraph


def check_version(version: str) -> None:
    """Refuse a LangGraph outside the pinned range (``>=1,<2``)."""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = -1
    if not SUPPORTED[0] <= major < SUPPORTED[1]:
        raise AgentDefinitionError(
            f"LangGraph {version} is outside the pinned range >=1,<2 that "
            "ledger.adapters.langgraph supports: install 'runledger[langgraph]'"
        )


# --- JSON of LangChain's objects --------------------------------------------------------------


def _message(message: Any, *, ids: bool = True) -> dict[str, Any]:
    from langchain_core.messages import message_to_dict

    data = _json(message_to_dict(message))
    if not ids and isinstance(data.get("data"), dict):
        data["data"].pop("id", None)
    return data


def _json(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return json.loads(json.dumps(to_jsonable_python(value, fallback=_opaque)))


def _opaque(value: Any) -> str:
    return f"<{type(value).__name__}>"  # never an address: the hash must be the same next time


def _state_json(value: Any) -> Any:
    """The graph's output as JSON: messages as LangChain's dicts, without the ids LangGraph
    makes up for them (a uuid4 per execution)."""
    from langchain_core.messages import BaseMessage

    if isinstance(value, BaseMessage):
        return _message(value, ids=False)
    if isinstance(value, Mapping):
        return {str(k): _state_json(v) for k, v in value.items() if k != "__interrupt__"}
    if isinstance(value, list | tuple):
        return [_state_json(v) for v in value]
    return _json(value)


def _result_json(result: Any) -> dict[str, Any]:
    return {
        "generations": [
            {"message": _message(g.message), "info": _json(g.generation_info)}
            for g in result.generations
        ],
        "llm_output": _json(result.llm_output),
    }


def _result_of(data: Mapping[str, Any]) -> Any:
    from langchain_core.messages import messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult

    return ChatResult(
        generations=[
            ChatGeneration(message=messages_from_dict([g["message"]])[0], generation_info=g["info"])
            for g in data["generations"]
        ],
        llm_output=data["llm_output"],
    )


# --- one run of a graph -----------------------------------------------------------------------


@dataclass
class Running:
    """What ``run_graph`` holds while the graph runs: the context, the effects, the counters
    that name the steps, and the steps already taken in this execution (LangGraph runs a node
    again from its start when an interrupt is resumed: its calls before the interrupt are the
    same steps, handed back as they were)."""

    ctx: RunContext
    step: str
    effects: dict[str, Lookup | None]
    loop: asyncio.AbstractEventLoop
    max_workers: int = 4
    passes: int = 0
    counters: dict[tuple[int, str], int] = field(default_factory=dict)
    taken: dict[str, tuple[str, Any]] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    gather: Any = None
    answers: dict[str, dict[str, int]] = field(default_factory=dict)

    def where(self, config: Mapping[str, Any] | None) -> tuple[str, str]:
        """The step prefix of the task running now (``<superstep>.<node>``, under the parent
        nodes of a subgraph) and the task's own key."""
        meta = dict((config or {}).get("metadata") or {})
        ns = str(meta.get("langgraph_checkpoint_ns") or "")
        parents = [part.split(":")[0] for part in ns.split("|")[:-1] if part]
        node = str(meta.get("langgraph_node") or "graph")
        path: Any = meta.get("langgraph_path") or ()
        if len(path) >= 2 and path[0] == "__pregel_push":
            node = f"{node}.{path[1]}"
        superstep = meta.get("langgraph_step")
        parts = [*parents, *([str(superstep)] if superstep is not None else []), node]
        return ".".join(parts), ns

    def next_model(self, config: Mapping[str, Any] | None) -> str:
        prefix, task = self.where(config)
        key = (self.passes, task or prefix)
        self.counters[key] = self.counters.get(key, 0) + 1
        return f"{prefix}.model.{self.counters[key]}"


_RUNNING: contextvars.ContextVar[Running | None] = contextvars.ContextVar(
    "runledger_langgraph_running", default=None
)
#: The effect key and fencing token of the tool running now as an effect step.
_EFFECT = CurrentEffect(
    "runledger_langgraph_effect",
    'a LangGraph tool that run_graph(effects={"<tool name>": lookup}) declares an effect',
)


def effect_key() -> str:
    """Inside a tool that ``run_graph(effects=...)`` names, while it runs as its effect step:
    the effect's key (``<run id>:<step id>``), stable across crashes and resumes. Send it as the
    downstream's idempotency key; the effect's lookup receives the same key."""
    return _EFFECT.key()


def fencing_token() -> int | None:
    """Inside an effect tool (as ``effect_key``): this execution's fencing token."""
    return _EFFECT.token()


# --- the model --------------------------------------------------------------------------------


def _request(model: Any, messages: list[Any], stop: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return {
        "model": f"{type(model).__name__}:{name if isinstance(name, str) else ''}",
        "messages": [_message(m, ids=False) for m in messages],
        "stop": _json(stop),
        "arguments": _json(kwargs),
    }


async def _model_step(
    running: Running, model: Any, request: dict[str, Any], send: Callable[[], Any]
) -> Any:
    """The model step of one chat-model call (recorded once, replayed after)."""
    from langchain_core.runnables.config import var_child_runnable_config

    step = running.next_model(var_child_runnable_config.get())
    digest = canonical.hash_text(canonical.dumps(canonical.normalize(request, step_id=step)))
    taken = running.taken.get(step)
    if taken is not None and taken[0] == digest:
        return _result_of(taken[1])

    async def ask(_data: dict[str, Any]) -> Any:
        return _result_json(await send())

    async with running.lock:
        faultpoints.point("langgraph.before_request")  # between two nodes' model calls
        with running.ctx.scope(running.step):
            answer = await running.ctx.model_request(  # type: ignore[misc]
                request, send=ask, model=request["model"], step=step
            )
    running.taken[step] = (digest, answer)
    return _result_of(answer)


def _patched_agenerate(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def agenerate(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        running = _RUNNING.get()
        if running is None:
            _refuse_direct("a chat model")
            return await original(self, messages, stop, run_manager, **kwargs)
        request = _request(self, messages, stop, kwargs)
        return await _model_step(
            running, self, request, lambda: original(self, messages, stop, run_manager, **kwargs)
        )

    agenerate.__runledger_guard__ = True  # type: ignore[attr-defined]
    return agenerate


def _patched_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def generate(
        self: Any, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        running = _RUNNING.get()
        if running is None:
            _refuse_direct("a chat model")
            return original(self, messages, stop, run_manager, **kwargs)
        # A sync node runs on a thread of the loop's executor: the step is taken on the loop.
        request = _request(self, messages, stop, kwargs)
        context = contextvars.copy_context()

        async def send() -> Any:
            def call() -> Any:
                return context.run(original, self, messages, stop, run_manager, **kwargs)

            return await asyncio.to_thread(call)

        step = _model_step(running, self, request, send)
        return asyncio.run_coroutine_threadsafe(step, running.loop).result()

    generate.__runledger_guard__ = True  # type: ignore[attr-defined]
    return generate


def _patched_stream(original: Callable[..., Any], how: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _RUNNING.get() is not None:
            raise AgentDefinitionError(f"{STREAMING} (model.{how})")
        return original(self, *args, **kwargs)

    stream.__runledger_guard__ = True  # type: ignore[attr-defined]
    return stream


# --- the tools --------------------------------------------------------------------------------


def _takes_fencing_token(fn: Callable[..., Any] | None) -> bool:
    if fn is None:
        return False
    try:
        return "fencing_token" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _settled_as_message(lookup: Lookup | None, name: str, call_id: str) -> Lookup | None:
    """The effect's lookup, its answer made the step's result: the ``ToolMessage`` the tool
    would have handed on (its content the found value as LangChain writes a tool's dict, JSON),
    so a settled effect replays as the same message. ``NOT_HAPPENED``/``None`` pass as they
    are."""
    if lookup is None:
        return None
    from langchain_core.messages import ToolMessage

    from ledger.registry import NOT_HAPPENED

    def message(found: Any) -> Any:
        if found is None or found is NOT_HAPPENED:
            return found
        content = found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)
        return _message(ToolMessage(content=content, name=name, tool_call_id=call_id))

    if inspect.iscoroutinefunction(lookup):

        async def alookup(key: str, **kwargs: Any) -> Any:
            return message(await lookup(key, **kwargs))

        return alookup

    def settle(key: str, **kwargs: Any) -> Any:
        return message(lookup(key, **kwargs))

    return settle


def _tool_step(running: Running, call: Mapping[str, Any], run_one: Callable[[], Any]) -> Tool:
    """The ledger step of one ``ToolNode`` call: a read, or an effect when ``effects=`` names
    the tool. Its result is the ``ToolMessage`` as JSON."""
    from langchain_core.messages import ToolMessage
    from langgraph.errors import GraphBubbleUp

    name = str(call["name"])
    effect = name in running.effects
    lookup = running.effects.get(name)

    async def invoke(
        *, idempotency_key: str | None = None, fencing_token: int | None = None, **_: Any
    ) -> Any:
        marked = (
            _EFFECT.set((idempotency_key, fencing_token)) if effect and idempotency_key else None
        )
        try:
            output = await run_one()
        except GraphBubbleUp as exc:
            raise AgentDefinitionError(
                f"tool {name!r} called interrupt() (or raised {type(exc).__name__}): a tool is "
                "one step and cannot stop halfway under runledger; call interrupt() in a node "
                "before the tool node (the person's answer then reaches the tool as state)"
            ) from exc
        finally:
            if marked is not None:
                _EFFECT.reset(marked)
        if not isinstance(output, ToolMessage):
            raise AgentDefinitionError(
                f"tool {name!r} returned {type(output).__name__}, not a ToolMessage: a tool that "
                "returns a Command (or several messages) is not durable under runledger; return "
                "the tool's value and update the state in a node"
            )
        return _message(output)

    return Tool(
        name=name,
        kind="effect" if effect else "read",
        fn=invoke,
        reconcile=_settled_as_message(lookup, name, str(call.get("id") or "")),
        takes_fencing_token=effect,
        reconcile_takes_fencing_token=_takes_fencing_token(lookup),
        is_async=True,
    )


async def _record_batch(running: Running, batch: list[Held]) -> dict[int, Any]:
    """The tool calls of one answer, as one ``ctx.parallel`` fan-out."""
    prefix = batch[0].answer
    keys = {h.index: f"{h.index}.{h.payload.tool.name}"[:100] for h in batch}
    branches = {keys[h.index]: (h.payload.tool, h.payload.arguments) for h in batch}
    async with running.lock:
        with running.ctx.scope(running.step):
            done = await running.ctx.parallel(  # type: ignore[misc]
                branches, step=f"{prefix}.tools", max_workers=running.max_workers
            )
    return {index: done[key] for index, key in keys.items()}


def _patched_afunc(original: Callable[..., Any]) -> Callable[..., Any]:
    """``ToolNode._afunc``: say up front which calls of the answer are coming (so the gather
    holds each until all have arrived), then run the node as LangGraph does."""

    @functools.wraps(original)
    async def afunc(self: Any, input: Any, config: Any, runtime: Any) -> Any:
        running = _RUNNING.get()
        if running is not None:
            tool_calls, _ = self._parse_input(input)
            prefix, _task = running.where(config)
            places = running.answers.setdefault(prefix, {})
            for index, call in enumerate(tool_calls):
                places[str(call.get("id"))] = index
                running.gather.expect(prefix, index)
        return await original(self, input, config, runtime)

    afunc.__runledger_guard__ = True  # type: ignore[attr-defined]
    return afunc


def _patched_arun_one(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def arun_one(self: Any, call: Any, input_type: Any, tool_runtime: Any) -> Any:
        running = _RUNNING.get()
        if running is None:
            return await original(self, call, input_type, tool_runtime)
        from langchain_core.messages import messages_from_dict

        from ledger.adapters._gather import ToolCall

        prefix, _task = running.where(tool_runtime.config)
        places = running.answers.setdefault(prefix, {})
        index = places.setdefault(str(call.get("id")), len(places))
        tool = _tool_step(running, call, lambda: original(self, call, input_type, tool_runtime))
        arguments = _json(dict(call.get("args") or {}))
        data = await running.gather.call(prefix, index, ToolCall(tool, arguments))
        return messages_from_dict([data])[0]

    arun_one.__runledger_guard__ = True  # type: ignore[attr-defined]
    return arun_one


def _patched_func(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def func(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _RUNNING.get() is not None:  # run_graph uses ainvoke: a ToolNode runs _afunc
            raise AgentDefinitionError("a ToolNode ran synchronously inside run_graph")
        return original(self, *args, **kwargs)

    func.__runledger_guard__ = True  # type: ignore[attr-defined]
    return func


# --- a graph run directly -----------------------------------------------------------------------


def _refuse_direct(how: str) -> None:
    from ledger import logcontext

    run_id = logcontext.current().get("run_id")
    if run_id and _RUNNING.get() is None:
        raise AgentDefinitionError(DIRECT.format(how=how, run_id=run_id))


def _guarded_graph(original: Callable[..., Any], how: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        _refuse_direct(f"graph.{how}")
        return original(self, *args, **kwargs)

    guarded.__runledger_guard__ = True  # type: ignore[attr-defined]
    return guarded


def _graph_guard(how: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return lambda original: _guarded_graph(original, how)


def _install() -> None:
    """Wrap LangChain's model boundary and ``ToolNode``'s call runner (see the module's
    docstring), and refuse a graph run directly inside a runledger execution. Once per
    process; inert outside ``run_graph`` but for that refusal."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langgraph.prebuilt.tool_node import ToolNode
    from langgraph.pregel import Pregel

    patches: list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        (BaseChatModel, "_agenerate_with_cache", _patched_agenerate),
        (BaseChatModel, "_generate_with_cache", _patched_generate),
        (BaseChatModel, "stream", lambda f: _patched_stream(f, "stream")),
        (BaseChatModel, "astream", lambda f: _patched_stream(f, "astream")),
        (ToolNode, "_afunc", _patched_afunc),
        (ToolNode, "_arun_one", _patched_arun_one),
        (ToolNode, "_func", _patched_func),
    ]
    for how in ("invoke", "ainvoke", "stream", "astream"):
        patches.append((Pregel, how, _graph_guard(how)))
    for cls, name, wrap in patches:
        original = cls.__dict__[name]
        if not getattr(original, "__runledger_guard__", False):
            setattr(cls, name, wrap(original))


# --- the author's call -------------------------------------------------------------------------


def check_effects(graph: Any, effects: Any) -> dict[str, Lookup | None]:
    """``run_graph(effects={tool name: lookup or None})``, each a tool of one of the graph's
    ``ToolNode``s (a misspelt effect would otherwise run as a read)."""
    if effects is None:
        return {}
    if not isinstance(effects, Mapping):
        raise AgentDefinitionError(
            "run_graph(effects=...) maps tool names to their lookups (or None), e.g. "
            f'effects={{"refund": find_refund}}, not {effects!r}'
        )
    offered = _tool_names(graph)
    for name, lookup in effects.items():
        if not isinstance(name, str) or not name:
            raise AgentDefinitionError(f"run_graph(effects=...) keys are tool names, not {name!r}")
        if name not in offered:
            raise AgentDefinitionError(
                f"run_graph(effects=...) names {name!r}, which no ToolNode of the graph offers "
                f"(its tools: {', '.join(sorted(offered)) or 'none'})"
            )
        if lookup is not None and not callable(lookup):
            raise AgentDefinitionError(
                f"run_graph(effects={{{name!r}: ...}}) takes a lookup function of the effect "
                f"key (or None: a crash inside it stops the run for a person), not {lookup!r}"
            )
    return dict(effects)


def _tool_names(graph: Any) -> set[str]:
    from langgraph.prebuilt.tool_node import ToolNode

    names: set[str] = set()
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", node)
        if isinstance(bound, ToolNode):
            names.update(bound.tools_by_name)
    return names


def _question(value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value[:4000]
    if isinstance(value, Mapping) and isinstance(value.get("question"), str):
        return str(value["question"])[:4000]
    return canonical.dumps(_json(value))[:4000]


def run_graph(
    ctx: RunContext,
    graph: Any,
    inputs: Any,
    *,
    effects: Mapping[str, Lookup | None] | None = None,
    config: Mapping[str, Any] | None = None,
    step: str = "graph",
    role: str = "operator",
    max_workers: int = 4,
) -> Awaitable[Any]:
    """Run the compiled LangGraph ``graph`` on ``inputs`` durably, in an ``async def`` ledger
    agent (``await run_graph(...)``; the arguments are checked when it is called, before
    anything runs); the graph's final state as JSON (messages as LangChain's message dicts).

    Every chat-model call in its nodes is a model step and every ``ToolNode`` call a step: a
    read unless ``effects`` names the tool — ``effects={"tool name": lookup}`` makes it an effect
    with an intent row, its key (``effect_key()`` inside the tool) and ``lookup(idempotency_key)``
    as its reconcile (``None``: a crash inside it stops the run for a person). The tool calls of
    one answer run as one fan-out of at most ``max_workers`` at once. An ``interrupt(value)``
    stops the run for a person holding ``role`` (``ctx.ask``, the value as the question); the
    answer resumes the graph with ``Command(resume=answer)``. ``config`` is the graph's
    ``RunnableConfig`` (``recursion_limit``, ``configurable`` keys); the thread is the run's.
    """
    from ledger.engine.context import AsyncRunContext

    _framework()
    if not isinstance(ctx, AsyncRunContext):
        raise AgentDefinitionError(
            "run_graph runs the graph as a coroutine on the worker's event loop: make the ledger "
            "agent an async def and write `await run_graph(ctx, graph, inputs, ...)`"
        )
    if max_workers < 1:
        raise AgentDefinitionError("run_graph(max_workers=...) must be at least 1")
    from langgraph.pregel import Pregel

    if not isinstance(graph, Pregel):
        raise AgentDefinitionError(
            f"run_graph takes a compiled LangGraph graph (builder.compile()), not {graph!r}"
        )
    declared = check_effects(graph, effects)
    return _run(ctx, graph, inputs, declared, dict(config or {}), step, role, max_workers)


async def _run(
    ctx: RunContext,
    graph: Any,
    inputs: Any,
    effects: dict[str, Lookup | None],
    config: dict[str, Any],
    step: str,
    role: str,
    max_workers: int,
) -> Any:
    from langgraph.types import Command

    from ledger.adapters._gather import Gather
    from ledger.adapters.langgraph_saver import RunledgerSaver
    from ledger.transitions.checkpoints import Fence

    running = Running(
        ctx=ctx,
        step=step,
        effects=effects,
        loop=asyncio.get_running_loop(),
        max_workers=max_workers,
    )

    async def dispatch(batch: list[Held]) -> dict[int, Any]:
        return await _record_batch(running, batch)

    running.gather = Gather(dispatch)
    token = ctx.lease_token
    saver = RunledgerSaver(fence=Fence(ctx.run_id, token) if token else None)
    thread_id = f"{ctx.run_id}/{step}"
    bound = graph.copy(update={"checkpointer": saver})
    configurable = {**dict(config.get("configurable") or {}), "thread_id": thread_id}
    run_config = {**config, "configurable": configurable}
    marked = _RUNNING.set(running)
    try:
        await saver.adelete_thread(thread_id)  # this execution writes the thread again
        payload: Any = inputs
        asked = 0
        while True:
            output = await bound.ainvoke(payload, run_config, durability="sync")
            state = await bound.aget_state(run_config)
            if not state.interrupts:
                return _state_json(output)
            answers = {}
            for pending in state.interrupts:
                asked += 1
                answers[pending.id] = await ctx.ask(  # type: ignore[misc]
                    _question(pending.value), role=role, step=f"{step}.interrupt.{asked}"
                )
            running.passes += 1
            if len(answers) == 1:
                payload = Command(resume=next(iter(answers.values())))
            else:
                payload = Command(resume=answers)
    finally:
        _RUNNING.reset(marked)


# --- the transcript ----------------------------------------------------------------------------


def transcript(run_id: str) -> list[dict[str, Any]]:
    """What was said in ``run_id``'s graphs: each stored model answer (the first request's
    messages too), with the step that said it. Reads only."""
    from ledger.selectors.transcript import langgraph_turns

    entries: list[dict[str, Any]] = []
    first = True
    for row in langgraph_turns(run_id):
        inputs, result = row["inputs"] or {}, row["result"] or {}
        if first:
            for message in inputs.get("messages", []):
                entries.extend(_said(message, row["step_id"]))
            first = False
        for generation in result.get("generations", []) if isinstance(result, dict) else []:
            entries.extend(_said(generation.get("message") or {}, row["step_id"]))
    return entries


def _said(message: Mapping[str, Any], step_id: str) -> list[dict[str, Any]]:
    kind = message.get("type")
    data = message.get("data") or {}
    role = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}.get(
        str(kind), str(kind)
    )
    said = []
    content = data.get("content")
    text = content if isinstance(content, str) else canonical.dumps(content)
    if text:
        said.append({"role": role, "text": text, "time": "", "step_id": step_id})
    for call in data.get("tool_calls") or []:
        args = canonical.dumps(call.get("args") or {})
        said.append(
            {
                "role": role,
                "text": f"calls {call.get('name')}({args})",
                "time": "",
                "step_id": step_id,
            }
        )
    return said


register_transcript("langgraph", transcript)

with contextlib.suppress(ImportError):  # without the extra, run_graph refuses on its own
    _install()
