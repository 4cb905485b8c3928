"""An OpenAI Agents SDK agent written as the SDK's docs write it, run durably by
``ledger.adapters.openai_agents.run_streamed``: an ``async def`` function tool called twice in
one answer (parallel calls), a sub-agent used through ``agent.as_tool`` with a tool of its own,
a ``LedgerSession``, an MCP server's tool declared an effect by name (a loopback FastMCP
server, in process), runledger effects with and without a lookup, every turn streamed.

The fake SDK ``Model`` decides each turn from the conversation it is given (the number of tool
results so far), for both ``get_response`` and ``stream_response`` (text deltas, then the
completed response). Each request it receives (``sent <agent> <turn>``), each it answers
(``<agent> <turn>``) and each sub-agent tool call (``history``) is appended to
``RUNLEDGER_OAF_ASKS`` when set, so a test counts them across processes; ``oaf.model`` is a
fault point inside the request, between the two.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agents import Agent, Model, ModelProvider, ModelResponse, Usage, function_tool
from agents.mcp import MCPServer
from fastmcp import Client, FastMCP
from fastmcp.server.dependencies import get_context
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseTextDeltaEvent,
)
from openai.types.responses.response_output_text import ResponseOutputText

from harness.openai_agents_agent import _get  # noqa: F401 - sets tracing off on import
from ledger import faultpoints
from ledger.adapters import openai_agents
from ledger.agents import RunContext, agent
from ledger.examples import simulators
from ledger.examples.agents import INVOICES, notify_team, refund_charge

FINAL = "Refunded inv_1001 and inv_1003, noted it and told the team."


def note(line: str) -> None:
    asks = os.environ.get("RUNLEDGER_OAF_ASKS")
    if asks:
        with open(asks, "a") as f:
            f.write(f"{line}\n")


# --- the tools, as the SDK's docs write them --------------------------------------------------


@function_tool
async def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faultpoints.point("fetch_invoice")
    return {"invoice_id": invoice_id, **INVOICES[invoice_id]}


@function_tool
def billing_history(customer: str) -> str:
    """The customer's billing history (the researcher's own tool)."""
    note("history")
    return f"{customer}: billed twice in March"


# --- the MCP server (a loopback FastMCP server, in process) -----------------------------------

billing = FastMCP("billing")


@billing.tool
def post_entry(account: str, amount_cents: int) -> dict[str, Any]:
    """Append to the accounting ledger; the idempotency key comes in the request's _meta."""
    from django.db import connection

    meta = get_context().request_context.meta or {}  # type: ignore[union-attr]
    key = meta.get("idempotency_key")  # type: ignore[union-attr]
    try:
        return simulators.ledger_append(account=account, amount_cents=amount_cents, memo=str(key))
    finally:
        connection.close()  # FastMCP runs a sync tool on a thread of its own: give it back


def find_entry(idempotency_key: str) -> Any:
    """The MCP effect's lookup: the accounting ledger searched by the key (its memo)."""
    return simulators.ledger_lookup(idempotency_key)


class InProcessMCP(MCPServer):
    """An SDK ``MCPServer`` speaking MCP to a FastMCP server in this process (fastmcp's
    in-memory transport), so the worker that runs the agent serves the tool."""

    def __init__(self, server: FastMCP, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._server = server
        self.session: Client | None = None

    @property
    def name(self) -> str:
        return "billing"

    async def connect(self) -> None:
        client = Client(self._server)
        await client.__aenter__()
        self.session = client

    async def cleanup(self) -> None:
        if self.session is not None:
            await self.session.__aexit__(None, None, None)
            self.session = None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        assert self.session is not None, "not connected"
        return list(await self.session.list_tools())

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        assert self.session is not None, "not connected"
        return await self.session.call_tool_mcp(tool_name, arguments or {}, meta=meta)

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


# --- the fake model ---------------------------------------------------------------------------


def _call(call_id: str, name: str, **arguments: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments)
    )


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def answer(name: str, items: list[Any]) -> tuple[int, list[Any]]:
    """The turn of agent ``name`` and its answer, from the tool results it was given."""
    results = sum(1 for i in items if _item(i, "type") == "function_call_output")
    if name == "researcher":
        turn = {0: 1, 1: 2}[results]
        if turn == 1:
            return turn, [_call("r1", "billing_history", customer="cus_ada")]
        return turn, [_message("cus_ada was double billed for inv_1001")]
    turn = {0: 1, 2: 2, 3: 3, 5: 4, 6: 5, 7: 6}[results]
    output: list[Any]
    if turn == 1:
        output = [
            _call("c1", "fetch_invoice", invoice_id="inv_1001"),
            _call("c2", "fetch_invoice", invoice_id="inv_1003"),
        ]
    elif turn == 2:
        output = [_call("c3", "research", input="Why refund inv_1001?")]
    elif turn == 3:
        output = [
            _call("c4", "refund_charge", customer="cus_ada", amount_cents=4200),
            _call("c5", "refund_charge", customer="cus_linus", amount_cents=990),
        ]
    elif turn == 4:
        output = [_call("c6", "post_entry", account="refunds", amount_cents=-5190)]
    elif turn == 5:
        output = [_call("c7", "notify_team", channel="#billing", text="refunded 2 invoices")]
    else:
        output = [_message(FINAL)]
    return turn, output


def _item(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class FakeModel(Model):
    """A fake SDK ``Model`` per agent name, answering from the conversation."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _answer(self, input: Any) -> tuple[int, list[Any]]:
        items = [] if isinstance(input, str) else list(input)
        turn, output = answer(self.name, items)
        note(f"sent {self.name} {turn}")
        faultpoints.point("oaf.model")  # inside a model request
        note(f"{self.name} {turn}")
        return turn, output

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        _turn, output = self._answer(input)
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> Any:
        from openai.types.responses import Response, ResponseUsage
        from openai.types.responses.response_usage import (
            InputTokensDetails,
            OutputTokensDetails,
        )

        _turn, output = self._answer(input)
        text = "".join(
            getattr(c, "text", "")
            for o in output
            if isinstance(o, ResponseOutputMessage)
            for c in o.content
        )
        for n, word in enumerate(text.split(" ") if text else []):
            yield ResponseTextDeltaEvent.model_construct(
                type="response.output_text.delta",
                delta=("" if n == 0 else " ") + word,
                item_id="msg",
                output_index=0,
                content_index=0,
                sequence_number=n,
                logprobs=[],
            )
        usage = ResponseUsage.model_construct(
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            input_tokens_details=InputTokensDetails.model_construct(cached_tokens=0),
            output_tokens_details=OutputTokensDetails.model_construct(reasoning_tokens=0),
        )
        response = Response.model_construct(
            id="resp",
            object="response",
            created_at=0.0,
            model=self.name,
            output=output,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            usage=usage,
        )
        yield ResponseCompletedEvent.model_construct(
            type="response.completed", response=response, sequence_number=99
        )


class FakeProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return FakeModel(str(model_name))


# --- the agents -------------------------------------------------------------------------------

researcher = Agent(
    name="researcher",
    instructions="Find out why a refund is due.",
    model="researcher",
    tools=[billing_history],
)


def desk() -> Agent[Any]:
    """The refund desk, as the SDK's docs write an agent (a new MCP server connection each
    execution: the adapter connects it on the run's loop)."""
    return Agent(
        name="desk",
        instructions="Fetch the invoices, research, refund, book it, tell the team, summarise.",
        model="desk",
        tools=[
            fetch_invoice,
            researcher.as_tool(tool_name="research", tool_description="Research a refund."),
            openai_agents.function_tool(refund_charge),
            openai_agents.function_tool(notify_team),
        ],
        mcp_servers=[InProcessMCP(billing, tool_meta_resolver=openai_agents.send_effect_key)],
    )


EFFECTS = {"post_entry": find_entry}


@agent(
    "oa_full",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=openai_agents.ledger_tools(desk(), effects=EFFECTS),
)
def oa_full(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The refund desk, streamed, with its conversation in a LedgerSession."""

    def on_event(event: Any) -> None:  # the live stream: text deltas while a turn is live
        data: Any = getattr(event, "data", None)
        if getattr(data, "type", None) == "response.output_text.delta":
            note(f"delta {data.delta}")

    result = openai_agents.run_streamed(
        ctx,
        desk(),
        "Please refund invoices inv_1001 and inv_1003.",
        on_event=on_event,
        model_provider=FakeProvider(),
        effects=EFFECTS,
        session=openai_agents.LedgerSession(inputs.get("conversation", "conv-1")),
    )
    return {"text": result.final_output}
