"""The Claude Agent SDK adapter's overhead: the same session (the SDK's bundled CLI against the
loopback Messages API of tests/support/llm_wire_claude.py: 5 model turns, 4 tool calls, 2 of
them effects) run with the plain SDK (the same tool functions as in-process MCP tools, no
ledger) and through ``ledger.adapters.claude_agent_sdk.run_session`` (every tool call a ledger
step, the transcript in the database).

    DATABASE_URL=... .venv/bin/python manage.py shell < harness/bench/claude_agent_sdk.py

Prints the median of five sessions each and the adapter's overhead per tool step.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from typing import Any

import claude_agent_sdk as sdk
from django.db import connection
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import canonical
from ledger.adapters import claude_agent_sdk as adapter
from ledger.processes import execute
from tests.support import claude_agents
from tests.support.llm_wire_claude import ClaudeWire

PROMPT = "Refund invoices inv_1001 and inv_1003."
ROUNDS = 5


def plain_tool(t: Any) -> Any:
    async def handle(args: dict[str, Any]) -> dict[str, Any]:
        def call() -> Any:
            try:
                extra = {"idempotency_key": uuid.uuid4().hex} if t.kind == "effect" else {}
                return t.fn(**args, **extra)
            finally:
                connection.close()

        value = await asyncio.to_thread(call)
        return {"content": [{"type": "text", "text": canonical.dumps(value)}]}

    return sdk.SdkMcpTool(
        name=t.name, description=t.description, input_schema=t.parameters(), handler=handle
    )


async def plain_session() -> None:
    server = sdk.create_sdk_mcp_server(
        "runledger", tools=[plain_tool(t) for t in claude_agents.TOOLS]
    )
    options = sdk.ClaudeAgentOptions(
        model="claude-sonnet-4-5",
        tools=[],
        max_turns=12,
        mcp_servers={"runledger": server},
        allowed_tools=[f"mcp__runledger__{t.name}" for t in claude_agents.TOOLS],
        cwd=tempfile.gettempdir(),
        env={"CLAUDE_CONFIG_DIR": tempfile.mkdtemp(prefix="bench-claude-")},
    )
    async for _message in sdk.query(prompt=PROMPT, options=options):
        pass


with ClaudeWire() as served:
    os.environ.update(served.env)
    plain: list[float] = []
    adapted: dict[float, list[float]] = {adapter.MIRROR_WAIT: [], 0.0: []}
    wait = adapter.MIRROR_WAIT
    for _ in range(ROUNDS):
        t = time.perf_counter()
        asyncio.run(plain_session())
        plain.append(time.perf_counter() - t)
        for mirror_wait, times in adapted.items():
            adapter.MIRROR_WAIT = mirror_wait
            run = start_unannounced(agent="claude_refund", inputs={"prompt": PROMPT})
            t = time.perf_counter()
            out = execute.run_execute(
                run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
            )
            times.append(time.perf_counter() - t)
            assert out is not None and out.status == "succeeded", out
    adapter.MIRROR_WAIT = wait
    mid = ROUNDS // 2
    p = sorted(plain)[mid]
    print(f"claude-agent-sdk session, 5 turns + 4 tool calls: plain SDK median {p * 1000:.0f} ms")
    for mirror_wait, times in adapted.items():
        a = sorted(times)[mid]
        print(
            f"  through the ledger (waiting up to {mirror_wait:g} s for the transcript mirror): "
            f"median {a * 1000:.0f} ms; overhead {(a - p) * 1000 / 4:.0f} ms per tool step"
        )
