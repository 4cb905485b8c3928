"""``/api/v1/`` itself: which runledger answers (its version) and where its description is."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field

import ledger
from runs.api.auth import require
from runs.api.models import ACTION_PERMISSIONS
from runs.api.routers.runs import REFUSALS

router = Router(tags=["service"])


class TokenOut(Schema):
    name: str
    role: str
    person: str | None = Field(description="the person it acts for (None: a service's token)")
    team: str | None = Field(description="the team it is bound to (None: not bound to one)")
    teams: dict[str, list[str] | None] = Field(
        description="per action (read, start, operate, propose, subscribe, approve): the teams "
        "it may do it in now (null: every team; []: none)"
    )


class ServiceOut(Schema):
    name: str
    version: str
    api: str
    openapi: str
    token: TokenOut


@router.get(
    "/",
    response={200: ServiceOut, **REFUSALS},
    summary="This runledger: its version",
    description="runledger's version (as `runledger --version` and the dashboard's footer say "
    "it) and the API's: a client can check what it talks to. Any token may read it. `token` "
    "says which token asked: its role, person, team, and the teams where it may do each "
    "action now.",
)
def root(request: HttpRequest) -> ServiceOut:
    token = require(request, "read")
    reaches = {a: token.teams_for(a) for a in ACTION_PERMISSIONS}
    return ServiceOut(
        name="runledger",
        version=ledger.__version__,
        api="1",
        openapi="/api/v1/openapi.json",
        token=TokenOut(
            name=token.name,
            role=token.role,
            person=token.user.get_username() if token.user is not None else None,
            team=token.team or None,
            teams={a: None if t is None else sorted(t) for a, t in reaches.items()},
        ),
    )
