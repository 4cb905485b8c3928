"""The agents registered in this process: what they require, their plan version, their tools."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from ledger import registry
from runs.api.auth import require
from runs.api.routers.runs import REFUSALS
from runs.api.schemas import AgentOut

router = Router(tags=["agents"])


@router.get("/agents", response={200: list[AgentOut], **REFUSALS}, summary="Registered agents")
def agents(request: HttpRequest) -> list[AgentOut]:
    require(request, "read")
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
    ]
