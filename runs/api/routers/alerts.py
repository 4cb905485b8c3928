"""Alerts and incidents: the alert rules with their open incidents, one incident, its
acknowledgement (the token's person — or ``api:<name>`` — is then on its runs, as the Alerts
page's button does: ``ledger.processes.alerting``), and the stopped runs grouped by cause (the
Incidents page's groups)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from ledger import selectors, transitions
from ledger.models import Alert, Run
from ledger.processes import alerting
from runs.api import problems
from runs.api.auth import actor, reach, require
from runs.api.routers.runs import REFUSALS
from runs.api.schemas import Strict, refuse_unknown_query

router = Router(tags=["alerts"])

WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


class AlertOut(Schema):
    id: int
    rule: str
    scope: str = Field(description="the agent or tool the incident is about ('' for all)")
    dedup_key: str = Field(description="the key the receivers group on (PagerDuty's dedup_key, "
                           "Opsgenie's alias)")  # fmt: skip
    status: Literal["triggered", "acknowledged", "resolved"]
    summary: str
    count: int = Field(description="what the last evaluation counted")
    run_ids: list[str] = Field(description="the runs it covers (the first of them)")
    opened_at: datetime
    seen_at: datetime
    acked_by: str
    acked_at: datetime | None
    resolved_at: datetime | None

    @staticmethod
    def of(alert: Alert) -> AlertOut:
        return AlertOut(
            id=alert.pk,
            rule=alert.rule,
            scope=alert.scope,
            dedup_key=alert.dedup_key,
            status=alert.status,  # type: ignore[arg-type]
            summary=alert.summary,
            count=int((alert.detail or {}).get("count", 0)),
            run_ids=alert.run_ids,
            opened_at=alert.opened_at,
            seen_at=alert.seen_at,
            acked_by=alert.acked_by,
            acked_at=alert.acked_at,
            resolved_at=alert.resolved_at,
        )


class RuleOut(Schema):
    name: str
    kind: str
    condition: str
    per: str
    severity: str
    receivers: list[str]
    open: list[AlertOut] = Field(description="its incidents not resolved")


class AlertsOut(Schema):
    rules: list[RuleOut]
    resolved: list[AlertOut] = Field(description="incidents resolved lately, newest first")


class AckOut(Schema):
    alert: AlertOut
    changed: bool = Field(description="false: it was acknowledged already (nothing changed)")
    taken: list[str] = Field(description="the runs you are on now")
    held: list[str] = Field(description="the runs someone else was on already")


class GroupOut(Schema):
    status: Literal["needs_attention", "failed"]
    agent: str
    step: str
    reason: str
    signature: str = Field(description="the error with numbers, ids and hashes taken out")
    count: int
    first_seen: datetime
    last_seen: datetime


class IncidentsQuery(Strict):
    since: Literal["1h", "24h", "7d"] = "24h"


def _seen(request: HttpRequest, alerts: list[Alert]) -> list[Alert]:
    """The incidents this token may read: every one for a token that reaches every team, else
    those whose runs are all of its teams (an incident with no run, or with a run of another
    team, counts what the token may not see)."""
    teams = reach(request)
    if teams is None:
        return alerts
    ids = {run_id for a in alerts for run_id in a.run_ids or []}
    team_of_run = dict(Run.objects.filter(pk__in=list(ids)).values_list("run_id", "team"))
    return [a for a in alerts if a.run_ids and all(team_of_run.get(r) in teams for r in a.run_ids)]


def _alert(request: HttpRequest, alert_id: int) -> Alert:
    found = Alert.objects.filter(pk=alert_id).first()
    if found is None or not _seen(request, [found]):
        raise problems.not_found(f"no alert #{alert_id}")
    return found


@router.get("/alerts", response={200: AlertsOut, **REFUSALS}, summary="Alert rules and incidents")
def alerts(request: HttpRequest) -> AlertsOut:
    """The declared rules, each with its open incidents, and the incidents resolved lately. A
    token limited to some teams sees the incidents whose runs are all of its teams."""
    require(request, "read")
    config = alerting.configured()
    open_alerts = _seen(request, list(selectors.alerts_open()))
    rules = [
        RuleOut(
            name=r.name,
            kind=r.kind,
            condition=r.describe(),
            per=r.per,
            severity=r.severity,
            receivers=list(r.to),
            open=[AlertOut.of(a) for a in open_alerts if a.rule == r.name],
        )
        for r in config.rules
    ]
    resolved = [AlertOut.of(a) for a in _seen(request, selectors.alerts_recent(limit=50))]
    return AlertsOut(rules=rules, resolved=resolved)


@router.get("/alerts/{alert_id}", response={200: AlertOut, **REFUSALS}, summary="One incident")
def alert(request: HttpRequest, alert_id: int) -> AlertOut:
    require(request, "read")
    return AlertOut.of(_alert(request, alert_id))


@router.post(
    "/alerts/{alert_id}/ack",
    response={200: AckOut, **REFUSALS},
    summary="Acknowledge an incident",
    description="Stops its paging (the receivers are told) and puts the token's person (or "
    "`api:<name>`) on each run it covers that nobody is on yet. A repeat changes nothing "
    "(`changed` false); a resolved incident answers 409.",
)
def ack(request: HttpRequest, alert_id: int) -> AckOut:
    token = require(request, "operate")
    found = _alert(request, alert_id)
    teams = reach(request, "operate")
    if teams is not None and not all(
        t in teams for t in Run.objects.filter(pk__in=found.run_ids).values_list("team", flat=True)
    ):
        raise problems.forbidden("this token may not operate every run of this incident")
    try:
        done = alerting.alert_acknowledge(alert_id=alert_id, by=actor(token))
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return AckOut(alert=AlertOut.of(done.alert), changed=done.changed, taken=done.taken,
                  held=done.held)  # fmt: skip


@router.get(
    "/incidents",
    response={200: list[GroupOut], **REFUSALS},
    summary="Stopped runs grouped by cause",
)
def incidents(request: HttpRequest, q: Query[IncidentsQuery]) -> list[GroupOut]:
    """The runs needing attention (all) and failed (within ``since``) grouped by agent, step,
    reason and error signature, largest group first (at most 200 groups)."""
    require(request, "read")
    refuse_unknown_query(request, IncidentsQuery)
    groups = selectors.incident_groups(
        failed_since=timezone.now() - WINDOWS[q.since], teams=reach(request)
    )
    return [
        GroupOut(
            status=g.status,  # type: ignore[arg-type]
            agent=g.agent,
            step=g.step,
            reason=g.reason,
            signature=g.signature,
            count=g.count,
            first_seen=g.first_seen,
            last_seen=g.last_seen,
        )
        for g in groups
    ]
