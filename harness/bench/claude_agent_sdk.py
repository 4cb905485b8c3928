"""The Claude Agent SDK adapter's overhead: the same session (the SDK's bundled CLI against the
loopback Messages API of tests/support/llm_wire_claude.py: 4 model requests, 4 tool calls, 2 of
them effects) run

- with the plain SDK (the same tool functions as in-process MCP tools, no ledger);
- with the plain SDK whose CLI talks through the adapter's model proxy passing every request
  through (the proxy's HTTP hop alone);
- through ``ledger.adapters.claude_agent_sdk.run_session`` (every model request and tool call a
  ledger step, the transcript in the database);
- and that run executed again, everything answered from the ledger (a resume's walk).

    DATABASE_URL=... .venv/bin/python manage.py shell < harness/bench/claude_agent_sdk.py

Prints the median of five sessions each, the proxy's overhead per model request and the
adapter's per step.
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
from ledger import canonical, transitions
from ledger.adapters.claude_model_proxy import ModelProxy
from ledger.models import Run
from ledger.processes import execute
from tests.support import claude_agents
from tests.support.llm_wire_claude import ClaudeWire

PROMPT = "Refund invoices inv_1001 and inv_1003."
ROUNDS = 5
MODEL_REQUESTS = 4
STEPS = 8  # 4 model requests, 4 tool calls


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


async def plain_session(base_url: str | None = None) -> None:
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
        env={
            "CLAUDE_CONFIG_DIR": tempfile.mkdtemp(prefix="bench-claude-"),
            **({"ANTHROPIC_BASE_URL": base_url} if base_url else {}),
        },
    )
    async for _message in sdk.query(prompt=PROMPT, options=options):
        pass


async def proxied_session(upstream: str) -> None:
    async def never(*_args: Any) -> Any:
        raise AssertionError("no request is a step here")

    proxy = ModelProxy(upstream=upstream, tool_prefix="mcp__nothing__", on_step=never)
    async with proxy.serving() as url:
        await plain_session(url)
    assert proxy.passed_through == MODEL_REQUESTS, proxy.passed_through


def timed_execution(run_id: str) -> float:
    t = time.perf_counter()
    out = execute.run_execute(run_id=run_id, worker="bench", clock=timezone.now, heartbeat=False)
    took = time.perf_counter() - t
    assert out is not None and out.status == "succeeded", out
    return took


def median(times: list[float]) -> float:
    return sorted(times)[len(times) // 2]


with ClaudeWire() as served:
    os.environ.update(served.env)
    plain: list[float] = []
    proxied: list[float] = []
    adapted: list[float] = []
    replayed: list[float] = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        asyncio.run(plain_session())
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        asyncio.run(proxied_session(served.url))
        proxied.append(time.perf_counter() - t)
        run = start_unannounced(agent="claude_refund", inputs={"prompt": PROMPT})
        adapted.append(timed_execution(run.run_id))
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(
            run_id=run.run_id, by="bench", reason="replay", seen_version=None, anyway=True
        )
        replayed.append(timed_execution(run.run_id))
    p, x, a, r = median(plain), median(proxied), median(adapted), median(replayed)
    load = os.getloadavg()[0]
    print(f"claude-agent-sdk session, 4 model requests + 4 tool calls (load {load:.2f}):")
    print(f"claude_sdk_plain_session: {p * 1000:.0f} ms")
    print(f"claude_sdk_through_the_proxy_session: {x * 1000:.0f} ms")
    print(f"claude_proxy_overhead_per_model_request: {(x - p) * 1000 / MODEL_REQUESTS:.1f} ms")
    print(f"claude_adapter_session: {a * 1000:.0f} ms")
    print(f"claude_adapter_overhead_per_step: {(a - p) * 1000 / STEPS:.1f} ms")
    print(f"claude_adapter_replayed_session: {r * 1000:.0f} ms")
