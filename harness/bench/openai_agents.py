"""The OpenAI Agents SDK adapter's per-step overhead: the scripted refund agent of
``harness.openai_agents_agent`` (4 model calls, 2 reads, 3 effects, 1 guardrail: 10 steps)
run durably (``ledger.adapters.openai_agents.run`` under a worker's execution) against the same
SDK agent run by the plain ``Runner`` with the same tools doing the same work (the simulators'
writes) and no ledger.

    DATABASE_URL=... RUNLEDGER_HARNESS=1 \
        .venv/bin/python manage.py shell < harness/bench/openai_agents.py

Prints the medians of 15 runs each and the difference per step. Part of ``make bench``.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
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
    return refund_charge.fn(customer, amount_cents, idempotency_key=str(uuid.uuid4()))


@function_tool
def plain_notify(channel: str, text: str) -> dict[str, Any]:
    """Tell the team (the same notifier write)."""
    return notify_team.fn(channel=channel, text=text, idempotency_key=str(uuid.uuid4()))


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
    f"({STEPS} steps: 4 model calls, 2 reads, 3 effects, 1 guardrail)"
)
