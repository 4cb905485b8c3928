"""A Claude Agent SDK agent on the ledger, for the adapter's tests (``tests/ledger/adapters``).

The session's model is whatever ``ANTHROPIC_BASE_URL`` names (the tests point it at
``tests.support.llm_wire_claude``); its tools are the examples' invoice read, the refund (an
effect with a lookup) and the team notification (an effect without one). Its system prompt is
``RUNLEDGER_CLAUDE_SYSTEM_PROMPT`` when set (a test changes it between a crash and a resume,
as a deploy would).
"""

from __future__ import annotations

import os
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

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
