"""An agent in two releases, for the rolling-deploy test: the release is the worker's
``RUNLEDGER_TEST_RELEASE`` (1 unless set). Release 2 rewrites the prompt of the runs started with
``changes`` — a recorded ``ask`` step of such a run is stale under it, as ``check_deploy``
predicts — and leaves the others' as they were. The ``wait`` step holds until the test opens
the gate (a step in flight when the deploy begins)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ledger.agents import RunContext, agent, tool

RELEASE = os.environ.get("RUNLEDGER_TEST_RELEASE", "1")
NAME = "release-agent"


@tool(kind="read", name="release-ask")
def ask(prompt: str) -> str:
    return f"answer to {prompt!r}"


@tool(kind="read", name="release-wait")
def wait(gate: str) -> bool:
    opened = Path(gate) / "open"
    deadline = time.monotonic() + 600
    while not opened.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


@agent(NAME, max_resumes=5, tools=[ask, wait])
def release_agent(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    prompt = "summarise"
    if inputs["changes"] and RELEASE != "1":
        prompt = "summarise in one line"
    first = ctx.call(ask, step="ask", prompt=prompt)
    ctx.call(wait, step="wait", gate=inputs["gate"])
    return {"first": first, "after": ctx.call(ask, step="after", prompt="done")}
