"""An agent whose second step a "deploy" renames, for the tests of the way forward from a
divergence: under the old code step ``b`` fails (its upstream is down); ``deploy()`` renames it
to ``c`` and brings the upstream back, so a resume diverges (policy ``refuse``) and a clean run
succeeds."""

from __future__ import annotations

from typing import Any

from ledger import registry
from ledger.agents import agent, tool

PLAN = {"second": "b", "fail": True}
NAME = "plan-change-agent"


@tool(kind="read", retries=0, name="plan_change_first")
def first() -> int:
    return 1


@tool(kind="read", retries=0, name="plan_change_flaky")
def flaky() -> int:
    if PLAN["fail"]:
        raise RuntimeError("the upstream is down")
    return 2


def register() -> str:
    """Register the agent under the old code; returns its name (unregister it after)."""
    PLAN.update(second="b", fail=True)

    @agent(NAME, divergence="refuse", title="Plan for {who}", requires=("who",))
    def plan_agent(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        ctx.call(first, step="a")
        return {"second": ctx.call(flaky, step=PLAN["second"])}

    return NAME


def deploy() -> None:
    PLAN.update(second="c", fail=False)


def unregister() -> None:
    registry.unregister_agent(NAME)
