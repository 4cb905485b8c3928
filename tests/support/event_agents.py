"""A small agent for the completion-event tests, loaded by the test process and by the workers:
``events-echo`` reads its inputs back through one recorded step and succeeds with them, fails
when told (``{"fail": "why"}``), or continues as new once (``{"continue": true}``). Its step has
a crash point (``events.echo``), and it has no resume budget: a run whose worker died there
stops as needs_attention (budget) when it is executed again.
"""

from __future__ import annotations

from typing import Any

from ledger import faultpoints
from ledger.agents import RunContext, agent, tool


@tool(kind="read", name="events_echo")
def echo(value: Any) -> Any:
    faultpoints.point("events.echo")
    return value


@agent("events-echo", plan_version="1", max_resumes=0, tools=[echo], title="Echo {n}")
def events_echo(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    seen = ctx.call(echo, step="echo", value=inputs)
    if inputs.get("fail"):
        raise ValueError(inputs["fail"])
    if inputs.get("continue"):
        ctx.continue_as_new({**inputs, "continue": False, "continued": True})
    return {"echo": seen}
