"""A Claude Agent SDK agent on the ledger, for the adapter's tests (``tests/ledger/adapters``).

The session's model is whatever ``ANTHROPIC_BASE_URL`` names (the tests point it at
``tests.support.llm_wire_claude``); its tools are the examples' invoice read, the refund (an
effect with a lookup) and the team notification (an effect without one). Its system prompt is
``RUNLEDGER_CLAUDE_SYSTEM_PROMPT`` when set (a test changes it between a crash and a resume,
as a deploy would).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server
from claude_agent_sdk import tool as sdk_tool

from ledger.adapters.claude_agent_sdk import run_session
from ledger.agents import RunContext, agent
from ledger.examples.agents import fetch_invoice, notify_team, refund_charge

TOOLS = [fetch_invoice, refund_charge, notify_team]
SYSTEM_PROMPT = "You refund invoices for the billing team."


@agent("claude_refund", plan_version="1", tools=TOOLS)
def claude_refund(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    system = os.environ.get("RUNLEDGER_CLAUDE_SYSTEM_PROMPT", SYSTEM_PROMPT)
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5", system_prompt=system, tools=[], max_turns=12
    )
    return run_session(ctx, inputs["prompt"], tools=TOOLS, options=options)


# --- the notification as the author's own in-process MCP server's tool -----------------------


@sdk_tool("notify_team", "Post to the team's channel.", {"channel": str, "text": str})
async def notify_by_mcp(args: dict[str, Any]) -> dict[str, Any]:
    """The author's MCP tool, as the SDK's docs write one; the effect key from the adapter."""
    from ledger.adapters.claude_agent_sdk import effect_key
    from ledger.examples import simulators

    sent = await asyncio.to_thread(  # the ORM is sync: off the session's event loop
        simulators.notifier_send,
        channel=args["channel"],
        text=args["text"],
        idempotency_key=effect_key(),
    )
    return {"content": [{"type": "text", "text": json.dumps(sent)}]}


TEAM = create_sdk_mcp_server("team", tools=[notify_by_mcp])


@agent("claude_refund_mcp", plan_version="1", tools=TOOLS[:2])
def claude_refund_mcp(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The refund session whose notification is a tool of the author's own MCP server,
    declared an effect without a lookup."""
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5",
        system_prompt=SYSTEM_PROMPT,
        tools=[],
        max_turns=12,
        mcp_servers={"team": TEAM},
    )
    return run_session(
        ctx, inputs["prompt"], tools=TOOLS[:2], options=options, effects={"notify_team": None}
    )
