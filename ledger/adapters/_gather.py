"""The tool calls of one model answer, gathered on the agent's event loop into one fan-out.

A framework runs the tool calls of one answer as concurrent tasks, each of which reaches the
adapter on its own (PydanticAI's toolset ``call_tool``, the OpenAI Agents SDK's
``on_invoke_tool``). ``Gather`` holds each call until every call the framework is going to run
for that answer has arrived, then hands them to ``dispatch`` at once, in the model's order: the
adapter runs them as one ``ctx.parallel`` fan-out on the run's thread, whose siblings commit on
their own and replay on their own.

Which calls are coming is said up front (``expect``, from the stored answer or from the
framework's argument validation). A call the framework holds back after that (a hook refusing
it, a concurrency limit, a barrier tool) would keep the others waiting forever, so the held
calls are also let go once the loop has turned ``IDLE_TURNS`` times without a new arrival: they
then run as a fan-out of their own, still in the model's order. Either way the chain of steps
is the same, because the siblings are chained in the order of their step ids.

``run_calls`` is what a dispatch does with a batch on the run's thread: the calls as one
``ctx.parallel`` fan-out, then those behind an approval gate one at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ledger.engine import RunContext
    from ledger.registry import Tool

#: How many turns of the event loop a held call waits for its siblings that were expected but
#: have not arrived (tasks the framework created together arrive within a few turns).
IDLE_TURNS = 64


@dataclass
class Held:
    """One call waiting for its siblings: its answer, its place in the answer, what to run."""

    answer: str
    index: int
    payload: Any
    future: asyncio.Future[Any]


@dataclass
class _Answer:
    expected: list[int] = field(default_factory=list)  # indices, in the model's order
    held: dict[int, Held] = field(default_factory=dict)
    sent: set[int] = field(default_factory=set)
    arrivals: int = 0


Dispatch = Callable[[list[Held]], Awaitable[dict[int, Any]]]


class Gather:
    """Collects the calls of each answer; ``dispatch(held)`` returns their outcomes by index
    (or raises, which every held call of the batch then raises)."""

    def __init__(self, dispatch: Dispatch, *, idle_turns: int = IDLE_TURNS) -> None:
        self._dispatch = dispatch
        self._idle_turns = idle_turns
        self._answers: dict[str, _Answer] = {}
        self._tasks: set[asyncio.Future[Any]] = set()  # kept, so the loop does not drop them

    def expect(self, answer: str, index: int) -> None:
        """The framework will run call ``index`` of ``answer`` (said before it arrives)."""
        state = self._answers.setdefault(answer, _Answer())
        if index not in state.expected and index not in state.sent:
            state.expected.append(index)

    async def call(self, answer: str, index: int, payload: Any) -> Any:
        """Hold this call until its answer's expected calls are here; return its outcome."""
        state = self._answers.setdefault(answer, _Answer())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        state.held[index] = Held(answer, index, payload, future)
        state.arrivals += 1
        if self._complete(state):
            self._release(state)
        else:
            self._keep(self._watch(state, state.arrivals))
        return await future

    def _complete(self, state: _Answer) -> bool:
        waiting = [i for i in state.expected if i not in state.sent]
        return all(i in state.held for i in waiting)

    async def _watch(self, state: _Answer, arrivals: int) -> None:
        for _ in range(self._idle_turns):
            await asyncio.sleep(0)
            if state.arrivals != arrivals or not state.held:
                return  # a later arrival watches (or released) them
        self._release(state)

    def _release(self, state: _Answer) -> None:
        batch = [state.held.pop(i) for i in sorted(state.held)]
        state.sent.update(h.index for h in batch)
        self._keep(self._run(batch))

    def _keep(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[Held]) -> None:
        try:
            outcomes = await self._dispatch(batch)
        except BaseException as exc:
            for held in batch:
                if not held.future.done():
                    held.future.set_exception(exc)
            return
        for held in batch:
            if not held.future.done():
                held.future.set_result(outcomes[held.index])


# --- a batch on the run's thread -----------------------------------------------------------


@dataclass
class ToolCall:
    """One durable tool call of an answer (a ``Held`` call's payload): the ledger tool and the
    model's arguments."""

    tool: Tool
    arguments: dict[str, Any]


def run_calls(
    ctx: RunContext,
    batch: list[Held],
    *,
    prefix: str,
    max_workers: int,
    gated: Callable[[ToolCall], bool],
    call_gated: Callable[[ToolCall, str], Any] | None = None,
) -> dict[int, Any]:
    """On the run's thread: the batch's outcomes by index. The calls not ``gated`` run as one
    ``ctx.parallel`` fan-out, steps ``<prefix>.tools.<i>.<tool>`` (``i``: the call's place in
    the answer); then each gated call in the answer's order, ``call_gated(call, step_id)``
    (default: ``ctx.call`` of the tool at that step behind runledger's approval gate)."""
    behind = {h.index for h in batch if gated(h.payload)}
    plain = [h for h in batch if h.index not in behind]
    out: dict[int, Any] = {}
    if plain:
        keys = {h.index: f"{h.index}.{h.payload.tool.name}"[:100] for h in plain}
        branches = {keys[h.index]: (h.payload.tool, h.payload.arguments) for h in plain}
        done = ctx.parallel(branches, step=f"{prefix}.tools", max_workers=max_workers)
        out.update({index: done[key] for index, key in keys.items()})
    for held in batch:
        if held.index not in behind:
            continue
        call: ToolCall = held.payload
        step = f"{prefix}.tools.{held.index}.{call.tool.name}"
        if call_gated is not None:
            out[held.index] = call_gated(call, step)
        else:
            out[held.index] = ctx.call(call.tool, step=step, approval=True, **call.arguments)
    return out
