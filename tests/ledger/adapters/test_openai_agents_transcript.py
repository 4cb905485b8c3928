"""The OpenAI Agents SDK transcript (``openai_agents.transcript``, its rows from
``ledger.selectors.transcript.openai_agents_turns``): read in a constant number of queries
whatever the number of turns, without the steps' inputs (each turn's input repeats the whole
conversation so far), and the same entries as reading the inputs whole."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

pytest.importorskip("agents")

from harness import openai_agents_agent as example
from ledger import registry, transitions
from ledger.adapters import openai_agents
from ledger.agents import agent
from ledger.models import Step
from ledger.selectors.transcript import openai_agents_turns, openai_agents_turns_read

pytestmark = pytest.mark.django_db(transaction=True)

USERS = ["Count the steps.", "Then say how many."]


def counting_agent(turns: int) -> tuple[Any, Any]:
    """An SDK agent whose scripted model calls ``step_on`` (a plain SDK tool, a read) once a
    turn for ``turns - 1`` turns, then answers."""
    from agents import Agent as SDKAgent
    from agents import Model, ModelProvider, ModelResponse, Usage, function_tool

    @function_tool
    def step_on(k: int) -> dict[str, int]:
        """Take one more step."""
        return {"k": k}

    class Counting(Model):
        async def get_response(  # type: ignore[override]
            self, system: Any, input: Any, *args: Any, **kwargs: Any
        ) -> Any:
            items = [] if isinstance(input, str) else list(input)
            turn = 1 + sum(1 for i in items if example._get(i, "type") == "function_call_output")
            output: list[Any] = (
                [example._call(f"c{turn}", "step_on", k=turn)]
                if turn < turns
                else [example._message(f"{turns - 1} steps")]
            )
            usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    class Provider(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return Counting()

    sdk_agent = SDKAgent(name="counting", instructions="Count.", model="scripted", tools=[step_on])
    return sdk_agent, Provider()


def run_of(turns: int, execute: Any) -> str:
    sdk_agent, provider = counting_agent(turns)
    name = f"oa-counting-{turns}"

    def body(ctx: Any, inputs: Any) -> Any:
        items = [{"role": "user", "content": text} for text in USERS]
        result = openai_agents.run(ctx, sdk_agent, items, model_provider=provider, max_turns=99)
        return {"text": result.final_output}

    agent(name, tools=openai_agents.ledger_tools(sdk_agent))(body)
    try:
        run_id = transitions.run_start(agent=name, inputs={}).run_id
        assert execute(run_id).status == "succeeded"
    finally:
        registry.unregister_agent(name)
    return run_id


class Columns:
    """The columns each query sent back (``cursor.description``), through an execute wrapper."""

    def __init__(self) -> None:
        self.fetched: list[list[str]] = []

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        out = execute(sql, params, many, context)
        description = context["cursor"].description
        self.fetched.append([c.name for c in description or ()])
        return out


def test_the_transcript_reads_a_run_in_the_same_queries_at_3_and_30_turns_without_inputs(
    execute: Any,
) -> None:
    queries: dict[int, int] = {}
    fetched: dict[int, list[list[str]]] = {}
    for turns in (3, 30):
        run_id = run_of(turns, execute)
        assert Step.objects.filter(run_id=run_id, kind="model").count() == turns
        seen = Columns()
        with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(seen):
            said = openai_agents.transcript(run_id)
        queries[turns], fetched[turns] = len(captured.captured_queries), seen.fetched
        assert [(s["role"], s["step_id"]) for s in said] == [
            ("user", "openai.turn.1"),
            ("user", "openai.turn.1"),
            *[("tool_call", f"openai.turn.{n}") for n in range(1, turns)],
            ("assistant", f"openai.turn.{turns}"),
        ]
        assert [s["text"] for s in said[:2]] == USERS  # each user message once, not once a turn
        assert said[2]["text"] == 'step_on({"k": 1})'
        assert said[-1]["text"] == f"{turns - 1} steps" and said[-1]["time"]
    assert queries[3] == queries[30] == 1, queries
    assert fetched[3] == fetched[30]
    assert not any("inputs" in names for names in fetched[30]), fetched  # left in the database


def test_the_rows_are_those_of_reading_the_inputs_whole(execute: Any) -> None:
    """The query (PostgreSQL) gives what reading every input whole gives (the other databases'
    path): on runs the adapter wrote, and on rows that try its edges."""
    refunds = transitions.run_start(agent="oa_refunds", inputs={}).run_id
    assert execute(refunds).status == "succeeded"
    for run_id in (run_of(4, execute), refunds):
        assert openai_agents_turns(run_id) == openai_agents_turns_read(run_id)
        assert len(openai_agents_turns(run_id)) == 4
    run_id = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}).run_id
    now = timezone.now()
    user = [{"role": "user", "content": "one"}]
    out = [{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}]
    rows: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]] = [
        ("a.turn.1", "succeeded", {"adapter": "openai-agents", "input": "hello"}, {"output": out}),
        # a later turn: the string, the call and its output seen, then a new user message
        (
            "a.turn.2",
            "succeeded",
            {
                "adapter": "openai-agents",
                "input": [*user, *out, {"type": "function_call_output"}, *user, "not an item"],
            },
            {"output": []},
        ),
        ("other.turn.1", "succeeded", {"input": "not the adapter's"}, {"output": out}),
        ("a.turn.3", "failed", {"adapter": "openai-agents", "input": user * 9}, None),
        # a nested agent's first turn: its input is shorter than what was seen
        (
            "a.turn.2.tools.0.helper.turn.1",
            "succeeded",
            {"adapter": "openai-agents", "input": user},
            {},
        ),
        ("a.turn.4", "succeeded", {"adapter": "openai-agents", "input": "late"}, None),
        (
            "a.turn.5",
            "succeeded",
            {
                "adapter": "openai-agents",
                "input": [{"role": "user"}, {"role": "user", "content": [{"text": "x"}]}],
            },
            {"output": "not a list"},  # no items
        ),
    ]
    for seq, (step_id, status, inputs, result) in enumerate(rows, start=1):
        Step.objects.create(
            run_id=run_id,
            step_id=step_id,
            input_hash="-",
            status=status,
            updated_at=now,
            kind="model",
            seq=seq,
            inputs=inputs,
            result=result,
            finished_at=now if status == "succeeded" else None,
        )
    found = openai_agents_turns(run_id)
    assert found == openai_agents_turns_read(run_id)
    assert [(r["step_id"], r["users"]) for r in found] == [
        ("a.turn.1", ["hello"]),
        ("a.turn.2", ["one"]),
        ("a.turn.2.tools.0.helper.turn.1", []),
        ("a.turn.4", []),
        ("a.turn.5", [[{"text": "x"}]]),  # the first item was seen
    ]
    assert found[0]["output"] == out
    assert found[-1]["output"] == []
