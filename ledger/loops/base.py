"""What both tool-use loops share: limits and usage, and running one turn's tool calls."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ledger import canonical, live
from ledger.engine import RunContext
from ledger.errors import BudgetExhausted
from ledger.registry import Tool
from ledger.schemas import HIDDEN_PARAMS

#: Builds the SDK client when a turn must really be sent (never on a replay).
ClientFactory = Callable[[], Any]


@dataclass(frozen=True)
class Limits:
    """A run's limits for one loop; ``None`` means no limit.

    ``max_tokens`` counts input plus output tokens of every turn, as the responses report them;
    the cost is ``input * usd_per_mtok_input + output * usd_per_mtok_output`` per million
    tokens. A loop checks them before each turn: a turn that would start past one stops the run
    (``budget``). A person raises them by editing the run's ``inputs["limits"]`` (an audited
    admin edit) when the agent passes them through ``merged``, then resumes it.
    """

    max_turns: int | None = 20
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    usd_per_mtok_input: float = 0.0
    usd_per_mtok_output: float = 0.0

    def merged(self, overrides: Mapping[str, Any] | None) -> Limits:
        """These limits with the fields ``overrides`` names replaced (unknown names ignored)."""
        if not overrides:
            return self
        names = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if k in names})


@dataclass
class Usage:
    """What a loop has used so far (the same on a replay: it is read from stored answers)."""

    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    attempts: int = 0  # requests sent, the SDK's retries of 429/5xx included

    def add(self, *, input_tokens: Any, output_tokens: Any, attempts: Any) -> None:
        self.turns += 1
        self.input_tokens += int(input_tokens or 0)
        self.output_tokens += int(output_tokens or 0)
        self.attempts += int(attempts or 1)

    def cost_usd(self, limits: Limits) -> float:
        return (
            self.input_tokens * limits.usd_per_mtok_input
            + self.output_tokens * limits.usd_per_mtok_output
        ) / 1_000_000

    def as_dict(self, limits: Limits) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "attempts": self.attempts,
            "cost_usd": round(self.cost_usd(limits), 6),
        }


def check_limits(limits: Limits, usage: Usage, *, step_id: str) -> None:
    """Raise ``BudgetExhausted`` (the run stops, reason ``budget``) when the next turn would
    start past a limit; the detail carries every figure."""
    over = []
    if limits.max_turns is not None and usage.turns >= limits.max_turns:
        over.append(f"{usage.turns} turns of max_turns {limits.max_turns}")
    tokens = usage.input_tokens + usage.output_tokens
    if limits.max_tokens is not None and tokens >= limits.max_tokens:
        over.append(f"{tokens} tokens of max_tokens {limits.max_tokens}")
    cost = usage.cost_usd(limits)
    if limits.max_cost_usd is not None and cost >= limits.max_cost_usd:
        over.append(f"${cost:.4f} of max_cost_usd {limits.max_cost_usd}")
    if over:
        raise BudgetExhausted(
            step_id,
            f"loop limit reached before turn {usage.turns + 1}: {'; '.join(over)} "
            f"(used: {usage.turns} turns, {usage.input_tokens} input and {usage.output_tokens} "
            f"output tokens, ${cost:.4f}); raise inputs.limits and resume",
        )


@dataclass(frozen=True)
class ToolCall:
    """One tool call a model asked for: its id in the conversation, the tool, the arguments
    (``None`` when the model's arguments were not a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any] | None


@dataclass(frozen=True)
class ToolOutcome:
    call: ToolCall
    text: str  # what the model is given back: the result's canonical JSON, or the error
    is_error: bool = False
    step_id: str = ""


def run_tools(
    ctx: RunContext, calls: Sequence[ToolCall], tools: Sequence[Tool], *, step: str
) -> list[ToolOutcome]:
    """Run one turn's tool calls as one fan-out and return what to hand back, in call order.

    A call of an unknown tool or with arguments its signature refuses is answered with an
    error text without a step (deterministic: it depends only on the stored answer). A tool
    that fails after its retries fails the run, as any step does. Results go back as canonical
    JSON (sorted keys), so a replayed result gives the next turn the same request bytes.
    """
    by_name = {t.name: t for t in tools}
    branches: dict[str, tuple[Tool, Mapping[str, Any]]] = {}
    refused: dict[int, str] = {}
    for i, call in enumerate(calls):
        problem = _refusal(call, by_name.get(call.name))
        if problem:
            refused[i] = problem
        else:
            assert call.arguments is not None
            branches[branch_key(i, call.name)] = (by_name[call.name], call.arguments)
    results = ctx.parallel(branches, step=step) if branches else {}
    outcomes = []
    for i, call in enumerate(calls):
        if i in refused:
            outcomes.append(ToolOutcome(call, refused[i], is_error=True))
            continue
        key = branch_key(i, call.name)
        outcomes.append(ToolOutcome(call, canonical.dumps(results[key]), step_id=f"{step}.{key}"))
    return outcomes


def branch_key(index: int, name: str) -> str:
    """The fan-out key of a turn's ``index``-th tool call (its step id's last two parts)."""
    return f"{index}.{name}"[:100]


def _refusal(call: ToolCall, tool: Tool | None) -> str:
    if tool is None:
        return f"error: there is no tool named {call.name!r}"
    if call.arguments is None:
        return f"error: the arguments of {call.name} must be a JSON object"
    hidden = HIDDEN_PARAMS & set(call.arguments)
    if hidden:
        return f"error: {', '.join(sorted(hidden))} is not a parameter of {call.name}"
    try:
        inspect.signature(tool.fn).bind(**call.arguments, **dict.fromkeys(_hidden(tool)))
    except TypeError as exc:
        return f"error: {call.name}: {exc}"
    return ""


def _hidden(tool: Tool) -> list[str]:
    return [p for p in inspect.signature(tool.fn).parameters if p in HIDDEN_PARAMS]


#: Reads a streamed answer (the SDK's parsed stream of events), handing each piece of text to
#: ``ledger.live.delta`` as it comes; returns the whole answer, as the SDK's response model.
Accumulate = Callable[[Any], Any]


class Sender:
    """Sends one request through an SDK's raw-response method; the answer is the SDK's
    response model as JSON plus ``attempts``: 1 + the SDK's own retries of transient errors
    (429, 529, 5xx), all attempts of the same model step. The client is built on first use,
    so a loop that only replays needs no key and no SDK call.

    With ``streamed`` (the extra request arguments that ask for a stream, and how to read one)
    and a live reader possible (``ledger.live.wanted``: a model step executes, on PostgreSQL),
    the answer is asked for as a stream and its text handed on as it arrives; the answer
    recorded is the same whole response model. The extra arguments are not part of the
    step's inputs (its hash), so a run records the same steps whether it streamed or not."""

    def __init__(
        self,
        factory: ClientFactory,
        *,
        endpoint: Callable[[Any], Any],
        streamed: tuple[dict[str, Any], Accumulate] | None = None,
    ) -> None:
        self._factory = factory
        self._endpoint = endpoint
        self._streamed = streamed
        self._client: Any = None

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            self._client = self._factory()
        if self._streamed is not None and live.wanted():
            extra, accumulate = self._streamed
            raw = self._endpoint(self._client)(**request, **extra)
            whole = accumulate(raw.parse())
        else:
            raw = self._endpoint(self._client)(**request)
            whole = raw.parse()
        answer: dict[str, Any] = whole.model_dump(mode="json", exclude_none=True)
        answer["attempts"] = raw.retries_taken + 1
        return answer


@dataclass(frozen=True)
class Reply:
    """One stored answer, read in a wire format: the assistant message to append to the
    conversation, the tool calls it asks for, its text and why it stopped."""

    message: dict[str, Any]
    calls: list[ToolCall]
    text: str
    stop_reason: Any


class Wire(Protocol):
    """One provider's wire format, as the loop needs it."""

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The whole request of the next turn (hashed as the model step's inputs)."""
        ...

    def usage(self, answer: dict[str, Any]) -> tuple[Any, Any]:
        """(input tokens, output tokens) as the answer reports them."""
        ...

    def reply(self, answer: dict[str, Any]) -> Reply: ...

    def results(self, outcomes: list[ToolOutcome]) -> list[dict[str, Any]]:
        """The messages that hand the tool results back."""
        ...


def run_loop(
    ctx: RunContext,
    *,
    wire: Wire,
    messages: list[dict[str, Any]],
    tools: Sequence[Tool],
    limits: Limits,
    sender: Sender,
    model: str,
    step: str,
) -> dict[str, Any]:
    """Ask, run the tools asked for, hand the results back, until an answer asks for none.

    Each turn is the model step ``<step>.turn.<n>``, its calls one fan-out
    ``<step>.turn.<n>.tools``; the limits are checked before each turn.
    """
    usage = Usage()
    with ctx.scope(step):
        while True:
            turn = usage.turns + 1
            check_limits(limits, usage, step_id=f"{step}.turn.{turn}")
            answer = ctx.model_request(
                wire.request(messages), send=sender, model=model, step=f"turn.{turn}"
            )
            tokens_in, tokens_out = wire.usage(answer)
            attempts = answer.get("attempts")
            usage.add(input_tokens=tokens_in, output_tokens=tokens_out, attempts=attempts)
            reply = wire.reply(answer)
            messages.append(reply.message)
            if not reply.calls:
                return {
                    "text": reply.text,
                    "stop_reason": reply.stop_reason,
                    "usage": usage.as_dict(limits),
                    "messages": messages,
                }
            outcomes = run_tools(ctx, reply.calls, tools, step=f"turn.{turn}.tools")
            messages.extend(wire.results(outcomes))
