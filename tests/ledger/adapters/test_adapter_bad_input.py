"""Bad input to the framework adapters: a clear error at registration or at the step, saying
which tool and what to do, and never a half-written step (issue 21's "Bad input"). The
PydanticAI cases of a tool that is not a ledger tool, tools of the agent's own and a result that
is not JSON are in ``test_pydantic_ai.py``; the OpenAI Agents SDK's not-JSON result and bad
declarations in ``test_openai_agents.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from harness import fanout_agents as example
from ledger import registry, transitions
from ledger.agents import Tool, agent
from ledger.errors import AgentDefinitionError
from ledger.models import Step
from ledger.states import StepKind

pytestmark = pytest.mark.django_db(transaction=True)

KEYLESS = Tool(name="keyless", kind=StepKind.EFFECT, fn=lambda amount: amount)


def run_once(execute: Any, body: Any, name: str = "bad-input") -> Any:
    """Run an agent with ``body`` once; its outcome and its steps (status by step id)."""
    agent(name, tools=example.TOOLS)(body)
    try:
        run_id = transitions.run_start(agent=name, inputs={}).run_id
        outcome = execute(run_id)
    finally:
        registry.unregister_agent(name)
    steps = dict(Step.objects.filter(run_id=run_id).values_list("step_id", "status"))
    return outcome, steps


# --- PydanticAI ---------------------------------------------------------------------------------


def pydantic_agent_answering(*parts: Any, retries: int = 1) -> Any:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models.function import FunctionModel

    return PydanticAgent(
        FunctionModel(lambda messages, info: ModelResponse(parts=list(parts))), retries=retries
    )


@pytest.mark.parametrize(
    ("args", "name", "said"),
    [
        ('{"invoice_id": "inv_1001"', "fetch_invoice", "fetch_invoice"),  # not JSON
        ({"invoice": "inv_1001"}, "fetch_invoice", "fetch_invoice"),  # not its parameters
        ({"invoice_id": "inv_1001"}, "refund_everyone", "refund_everyone"),  # no such tool
    ],
)
def test_a_pydantic_ai_answer_it_cannot_use_is_retried_then_fails_without_a_tool_step(
    args: Any, name: str, said: str, execute: Any
) -> None:
    from pydantic_ai.messages import ToolCallPart

    from ledger.adapters.pydantic_ai import run_agent

    model = pydantic_agent_answering(ToolCallPart(name, args, "c1"))
    outcome, steps = run_once(
        execute, lambda ctx, inputs: run_agent(ctx, model, "hi", tools=example.TOOLS)
    )
    assert outcome.status == "failed", outcome
    assert said in outcome.detail and "retries" in outcome.detail, outcome.detail
    # PydanticAI retried once (its own ``retries``): each answer a model step, no tool step.
    assert steps == {"agent.turn.1": "succeeded", "agent.turn.2": "succeeded"}, steps


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"tools": [KEYLESS]}, "effect tool 'keyless' has no idempotency_key parameter"),
        (
            {"requires_approval": ["fetch_invoice"]},
            "tool 'fetch_invoice' requires approval but is a read",
        ),
        ({"requires_approval": ["wire_money"]}, "'wire_money', which is not one of"),
        ({"event_stream_handler": lambda ctx, events: None}, "streaming is not durable"),
        ({"max_workers": 0}, "max_workers=...) must be at least 1"),
    ],
)
def test_a_bad_pydantic_ai_declaration_is_refused_before_any_step(
    kwargs: dict[str, Any], said: str, execute: Any
) -> None:
    from ledger.adapters.pydantic_ai import run_agent

    kwargs = {"tools": example.TOOLS, **kwargs}
    outcome, steps = run_once(
        execute,
        lambda ctx, inputs: run_agent(ctx, example.pydantic_agent(), "hi", **kwargs),
    )
    assert outcome.status == "failed" and said in outcome.detail, outcome.detail
    assert steps == {}  # nothing written


def test_a_pydantic_ai_stream_under_runledger_is_refused_saying_why() -> None:
    """A ledger model's request is one stored answer: streaming it is refused, not faked."""
    import asyncio

    from pydantic_ai.models.test import TestModel

    from ledger.adapters.pydantic_ai import Bridge, Turns, ledger_model

    model = ledger_model(None, TestModel(), Bridge(), Turns())  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="streaming is not durable"):
        asyncio.run(example.pydantic_agent().run("hi", model=model, event_stream_handler=_drop))


async def _drop(ctx: Any, events: Any) -> None:
    async for _ in events:
        pass


def test_a_pydantic_ai_outside_the_pinned_range_is_refused_when_run_agent_starts(
    execute: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pydantic_ai

    from ledger.adapters.pydantic_ai import run_agent

    monkeypatch.setattr(pydantic_ai, "__version__", "3.0.0")
    outcome, steps = run_once(
        execute,
        lambda ctx, inputs: run_agent(ctx, example.pydantic_agent(), "hi", tools=example.TOOLS),
    )
    assert outcome.status == "failed" and ">=2,<3" in outcome.detail, outcome.detail
    assert steps == {}


# --- OpenAI Agents SDK --------------------------------------------------------------------------


def openai_run_answering(ctx: Any, *calls: tuple[str, str]) -> Any:
    """Run an SDK agent whose model answers each request with ``calls`` (name, arguments)."""
    from agents import Agent as SDKAgent
    from agents import Model, ModelProvider, ModelResponse, Usage
    from openai.types.responses import ResponseFunctionToolCall

    from ledger.adapters import openai_agents

    class Answers(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            output = [
                ResponseFunctionToolCall(
                    type="function_call", call_id=f"c{i}", name=name, arguments=arguments
                )
                for i, (name, arguments) in enumerate(calls)
            ]
            usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    class Provider(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return Answers()

    sdk_agent = SDKAgent(
        name="bad",
        model="answers",
        tools=[openai_agents.function_tool(t) for t in example.TOOLS],
    )
    return openai_agents.run(ctx, sdk_agent, "hi", model_provider=Provider())


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ([("fetch_invoice", '{"invoice_id": "inv_1001"')], "tool 'fetch_invoice': the model's"),
        ([("refund_everyone", "{}")], "refund_everyone"),
        # One call of the answer is bad: its good sibling is not run either.
        (
            [("fetch_invoice", json.dumps({"invoice_id": "inv_1001"})), ("notify_team", "[1]")],
            "tool 'notify_team': the model's arguments are not an object",
        ),
    ],
)
def test_an_openai_answer_the_sdk_cannot_use_fails_the_run_naming_the_tool_without_a_tool_step(
    calls: list[tuple[str, str]], said: str, execute: Any
) -> None:
    outcome, steps = run_once(execute, lambda ctx, inputs: openai_run_answering(ctx, *calls))
    assert outcome.status == "failed", outcome
    assert said in outcome.detail, outcome.detail
    assert steps == {"openai.turn.1": "succeeded"}, steps  # the answer, stored; no tool step


def test_bad_openai_declarations_are_refused_saying_what_to_do() -> None:
    from ledger.adapters import openai_agents

    with pytest.raises(AgentDefinitionError, match="'keyless' has no idempotency_key parameter"):
        openai_agents.function_tool(KEYLESS)
    with pytest.raises(AgentDefinitionError, match="takes an OpenAI Agents SDK Agent"):
        openai_agents.run_streamed(None, None, "hi")  # type: ignore[arg-type]
    sdk_agent, provider = example.openai_agent()
    with pytest.raises(AgentDefinitionError, match="must be at least 1"):
        openai_agents.run(None, sdk_agent, "hi", model_provider=provider, max_workers=0)  # type: ignore[arg-type]
    assert Step.objects.count() == 0


def test_a_pydantic_ai_agent_with_an_external_toolset_is_refused_naming_it(execute: Any) -> None:
    """External (deferred) tools are called outside the run: nothing the ledger could record."""
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import ExternalToolset

    from ledger.adapters.pydantic_ai import run_agent

    deferred = PydanticAgent(
        TestModel(), toolsets=[ExternalToolset([ToolDefinition(name="ask_the_bank")])]
    )
    outcome, steps = run_once(
        execute, lambda ctx, inputs: run_agent(ctx, deferred, "hi", tools=example.TOOLS)
    )
    assert outcome.status == "failed" and "toolsets of its own (ExternalToolset)" in outcome.detail
    assert steps == {}


def test_a_keyless_effect_is_refused_with_one_message_by_tool_and_by_every_adapter() -> None:
    """``@tool`` and each adapter's own check (for a ``Tool`` built without the decorator) are
    ``registry.require_idempotency_key``: the same message, naming the tool and what to add."""
    from ledger.adapters import openai_agents, pydantic_ai

    said = (
        "effect tool 'keyless' has no idempotency_key parameter: add a keyword parameter "
        "'*, idempotency_key: str'"
    )
    checks: list[Any] = [
        lambda: registry.tool(kind="effect", name="keyless")(lambda amount: amount),
        lambda: pydantic_ai.check_tools([KEYLESS]),
        lambda: openai_agents.function_tool(KEYLESS),
    ]
    try:
        from ledger.adapters import claude_agent_sdk
    except ImportError:
        pass
    else:
        checks.append(lambda: claude_agent_sdk.check_tools([KEYLESS]))
    for check in checks:
        with pytest.raises(AgentDefinitionError) as refused:
            check()
        assert str(refused.value).startswith(said), refused.value
    assert registry.get_tool("keyless") is None  # refused before it was registered
    registry.require_idempotency_key("keyed", lambda amount, *, idempotency_key: amount)
