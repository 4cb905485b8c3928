"""The agents registered in this process: what they require, their plan version, their tools;
and what each agent's model steps used and cost over a window."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router

from ledger import registry
from ledger.selectors.trends import WINDOWS, window_bounds
from ledger.selectors.usage import usage_by_agent
from runs.api.auth import reach, require
from runs.api.routers.runs import REFUSALS
from runs.api.schemas import (
    AgentOut,
    AgentUsageOut,
    AgentUsagePageOut,
    Strict,
    UsageOut,
    refuse_unknown_query,
)

router = Router(tags=["agents"])


@router.get("/agents", response={200: list[AgentOut], **REFUSALS}, summary="Registered agents")
def agents(request: HttpRequest) -> list[AgentOut]:
    require(request, "read")
    teams = reach(request)
    return [
        AgentOut(
            name=a.name,
            description=a.description,
            requires=list(a.requires),
            plan_version=a.plan_version,
            divergence=a.divergence,
            tools=sorted(t.name for t in a.tools),
        )
        for _, a in sorted(registry.agents().items())
        if teams is None or not a.team or a.team in teams
    ]


class UsageQuery(Strict):
    window: Literal["24h", "7d"] = "24h"


@router.get(
    "/agents/usage",
    response={200: AgentUsagePageOut, **REFUSALS},
    summary="Tokens and cost per agent",
)
def agents_usage(request: HttpRequest, q: Query[UsageQuery]) -> AgentUsagePageOut:
    """The tokens and cost of each agent's model steps recorded in the window (the Trends
    page's windows, ending with the current bar), most costly first, and their total: of the
    runs of the token's teams."""
    require(request, "read")
    refuse_unknown_query(request, UsageQuery)
    since, until = window_bounds(q.window, now=timezone.now())
    rows, total = usage_by_agent(since=since, until=until, teams=reach(request))
    return AgentUsagePageOut(
        window=q.window,
        since=since,
        until=until,
        agents=[
            AgentUsageOut(agent=a.agent, runs=a.runs, usage=UsageOut.of(a.usage)) for a in rows
        ],
        total=AgentUsageOut(agent=total.agent, runs=total.runs, usage=UsageOut.of(total.usage)),
    )


assert set(WINDOWS) == {"24h", "7d"}  # UsageQuery's windows are Trends'
