"""The OpenAI Agents SDK adapter's per-step overhead: the scripted refund agent of
``harness.openai_agents_agent`` (4 model calls, 2 reads, 3 effects, 1 guardrail: 10 steps)
run durably (``ledger.adapters.openai_agents.run`` under a worker's execution) against the same
SDK agent run by the plain ``Runner`` with the same tools doing the same work (the simulators'
writes) and no ledger.

    DATABASE_URL=... RUNLEDGER_HARNESS=1 \
        .venv/bin/python manage.py shell < harness/bench/openai_agents.py

Prints the medians of 15 runs each and the difference per step. Part of ``make bench``.

Then the same for the agent as the SDK's docs write it (``tests.support.openai_agents_full``:
an async tool twice in one answer, a sub-agent through ``as_tool`` with its own tool, a
``LedgerSession``, an MCP server's tool as an effect, every turn streamed): ``run_streamed`` on
the ledger against the plain ``Runner.run_streamed`` of the same agent with plain tools.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from django.db import connection
from django.utils import timezone

from harness import openai_agents_agent as example
from harness.unannounced import start_unannounced
from ledger.examples.agents import notify_team, refund_charge
from ledger.processes import execute

ROUNDS = 15
STEPS = 10


@function_tool
def plain_refund(customer: str, amount_cents: int) -> dict[str, Any]:
    """Refund (the same provider write, with a fresh key)."""
    try:
        return refund_charge.fn(customer, amount_cents, idempotency_key=str(uuid.uuid4()))
    finally:
        connection.close()  # the SDK runs a sync tool on a thread: give its connection back


@function_tool
def plain_notify(channel: str, text: str) -> dict[str, Any]:
    """Tell the team (the same notifier write)."""
    try:
        return notify_team.fn(channel=channel, text=text, idempotency_key=str(uuid.uuid4()))
    finally:
        connection.close()


plain_refund.name, plain_notify.name = "refund_charge", "notify_team"
plain = Agent(
    name="refunds",
    instructions=example.SYSTEM["2"],
    model="scripted",
    tools=[example.fetch_invoice, plain_refund, plain_notify],
    input_guardrails=[example.on_topic],
)
config = RunConfig(model_provider=example.ScriptedProvider(), tracing_disabled=True)
ask = "Please refund invoices inv_1001 and inv_1003."

sdk_times, durable_times = [], []
for _ in range(ROUNDS):
    t = time.perf_counter()
    result = Runner.run_sync(plain, ask, run_config=config)
    sdk_times.append(time.perf_counter() - t)
    assert result.final_output == example.FINAL, result.final_output

    run = start_unannounced(agent="oa_refunds", inputs={})
    t = time.perf_counter()
    out = execute.run_execute(
        run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
    )
    durable_times.append(time.perf_counter() - t)
    assert out is not None and out.status == "succeeded", out

sdk, durable = statistics.median(sdk_times), statistics.median(durable_times)
print(
    f"openai-agents adapter: plain SDK run {sdk * 1000:.1f} ms, "
    f"durable run {durable * 1000:.1f} ms "
    f"(median of {ROUNDS}); overhead {(durable - sdk) * 1000 / STEPS:.2f} ms per step "
    f"({STEPS} steps: 4 model calls, 2 reads, 3 effects, 1 guardrail); "
    f"ratio {durable / sdk:.1f}x"
)


# --- the agent as the SDK's docs write it: streamed, session, sub-agent, MCP --------------

import asyncio  # noqa: E402

from ledger.models import Step  # noqa: E402
from tests.support import openai_agents_full as full  # noqa: E402 - registers oa_full

plain_desk = Agent(
    name="desk",
    instructions="Fetch the invoices, research, refund, book it, tell the team, summarise.",
    model="desk",
    tools=[
        full.fetch_invoice,
        full.researcher.as_tool(tool_name="research", tool_description="Research a refund."),
        plain_refund,
        plain_notify,
    ],
)
full_config = RunConfig(model_provider=full.FakeProvider(), tracing_disabled=True)


async def plain_streamed() -> Any:
    server = full.InProcessMCP(full.billing)
    await server.connect()
    try:
        desk = plain_desk.clone(mcp_servers=[server])
        result = Runner.run_streamed(desk, ask, run_config=full_config)
        async for _event in result.stream_events():
            pass
        return result.final_output
    finally:
        await server.cleanup()


plain_times, full_times, full_steps = [], [], 0
for _ in range(ROUNDS):
    t = time.perf_counter()
    assert asyncio.run(plain_streamed()) == full.FINAL
    plain_times.append(time.perf_counter() - t)

    run = start_unannounced(agent="oa_full", inputs={"conversation": f"bench-{uuid.uuid4()}"})
    t = time.perf_counter()
    out = execute.run_execute(
        run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
    )
    full_times.append(time.perf_counter() - t)
    assert out is not None and out.status == "succeeded", out
    full_steps = Step.objects.filter(run_id=run.run_id).count()

plain_s, full_s = statistics.median(plain_times), statistics.median(full_times)
print(
    f"openai-agents adapter, the docs' agent streamed (session, sub-agent, MCP): plain SDK "
    f"run_streamed {plain_s * 1000:.1f} ms, durable {full_s * 1000:.1f} ms (median of "
    f"{ROUNDS}); overhead {(full_s - plain_s) * 1000 / full_steps:.2f} ms per step "
    f"({full_steps} steps); ratio {full_s / plain_s:.1f}x"
)
