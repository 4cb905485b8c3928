"""Webhook subscriptions: subscribe a URL to the completion events of an agent's runs (or of
one run), list them, remove one — ``ledger.events`` (``ledger.transitions.events``), with its
refusals (a URL that is not http(s), an unknown event, agent or run, both or neither of agent
and run, a subscription removed already). The signing secret is in the answer that made it,
once; a run's own subscriptions can also be made with its start (``POST /runs``)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status
from pydantic import Field

from ledger import events
from ledger.errors import OperationError
from ledger.inputs import queryable
from ledger.models import Run, WebhookSubscription
from runs.api import problems
from runs.api.auth import actor, check_reach, reach, require, whole_reach
from runs.api.routers.runs import REFUSALS, check_team_or_422, named_run
from runs.api.schemas import (
    Strict,
    WebhookCreatedOut,
    WebhookIn,
    WebhookOut,
    refuse_unknown_query,
)

router = Router(tags=["webhooks"])
LISTED = 500


class ListQuery(Strict):
    agent: str | None = Field(default=None, max_length=200)
    run_id: str | None = Field(default=None, max_length=64)
    removed: bool = Field(default=False, description="list removed subscriptions too")


@router.post(
    "/webhooks",
    response={201: WebhookCreatedOut, **REFUSALS},
    summary="Subscribe a URL to completion events",
    description="Of every run of `agent`, or of the one run `run_id` (exactly one of them). "
    "An agent's subscription is of one team's runs (`team`, default the token's team) or, "
    "made by a token that reaches every team and naming none, of every team's; a run of "
    "another team is refused as one that does not exist (422), a team the token may not "
    "subscribe in is a 403. "
    "Deliveries are signed as Standard Webhooks with the `secret` of this answer, shown once "
    "(verify them with `ledger.client.verify_webhook`).",
)
def subscribe(request: HttpRequest, body: WebhookIn) -> Status[WebhookCreatedOut]:
    token = require(request, "subscribe")
    team = ""
    if body.run_id is not None:
        named_run(request, body.run_id, "subscribe", f"there is no run {body.run_id!r}")
        if body.team is not None:
            raise problems.Problem(
                422, "invalid-input", "Invalid input", "team: only with agent (a run has its own)"
            )
    elif body.team is not None or token.team:
        team = body.team or token.team
        check_team_or_422(team)
        if not token.may("subscribe", team):
            raise problems.forbidden(f"this token may not subscribe to the team {team!r}'s runs")
    elif body.agent is not None:
        whole_reach(request, "subscribe", "an agent's subscription without a team")
    try:
        made, secret = events.subscribe(
            body.url,
            agent=body.agent,
            run_id=body.run_id,
            events=body.events,
            description=body.description,
            by=actor(token),
            team=team,
        )
    except OperationError as exc:
        raise problems.refusal(exc) from exc
    return Status(201, WebhookCreatedOut(**WebhookOut.of(made).model_dump(), secret=secret))


@router.get("/webhooks", response={200: list[WebhookOut], **REFUSALS}, summary="List subscriptions")
def subscriptions(request: HttpRequest, q: Query[ListQuery]) -> list[WebhookOut]:
    """The live subscriptions (of one agent or run when asked), oldest first, at most 500;
    never a secret."""
    require(request, "read")
    refuse_unknown_query(request, ListQuery)
    for text in (q.agent, q.run_id):
        if text is not None and not queryable(text):
            raise problems.Problem(422, "invalid-input", "Invalid input", "no NUL bytes, please")
    rows = events.subscriptions(
        agent=q.agent or "", run_id=q.run_id or "", removed=q.removed, teams=reach(request)
    )
    return [WebhookOut.of(s) for s in rows[:LISTED]]


@router.delete(
    "/webhooks/{subscription_id}",
    response={200: WebhookOut, **REFUSALS},
    summary="Remove a subscription",
    description="It gets no new events; deliveries still waiting for it are given up.",
)
def unsubscribe(request: HttpRequest, subscription_id: int) -> WebhookOut:
    token = require(request, "subscribe")
    found = WebhookSubscription.objects.filter(pk=subscription_id).first()
    missing = f"no webhook subscription #{subscription_id}"
    if found is None:
        raise problems.not_found(missing)
    if found.run_id:
        run = Run.objects.filter(pk=found.run_id).first()
        check_reach(request, run.team if run else "", "subscribe", missing)
    elif found.team:
        check_reach(request, found.team, "subscribe", missing)
    elif reach(request) is not None:
        raise problems.not_found(missing)  # every team's: not in this token's lists either
    try:
        removed = events.unsubscribe(subscription_id, by=actor(token))
    except OperationError as exc:
        raise problems.refusal(exc) from exc
    return WebhookOut.of(removed)
