"""What the operator pages read (selectors). Nothing here writes.

- ``settlement_queue``: every started effect that waits for a person, oldest first;
- ``settlement_evidence``: everything the settle form shows for one step;
- ``settlements_waiting``: proposals that wait for an approver;
- ``audit_events``: the audit, filtered by run, actor, action and time;
- ``edited_upstream``: steps that depend on an observation an admin edited.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from ledger import registry
from ledger.conf import conf
from ledger.inputs import queryable
from ledger.models import (
    AuditAction,
    AuditEvent,
    Notification,
    Run,
    RunStatus,
    Settlement,
    SettlementStatus,
    Step,
    StepKind,
    StepStatus,
    WebhookSubscription,
)
from ledger.selectors.runs import scoped, search_condition


def approval_required() -> bool:
    """Whether a settlement needs a second person (``RUNLEDGER_SETTLEMENT_APPROVAL``)."""
    return bool(conf.RUNLEDGER_SETTLEMENT_APPROVAL)


@dataclass(frozen=True)
class QueueItem:
    """A started effect waiting for a person. ``waiting_seconds`` counts from its intent commit."""

    step: Step
    run: Run
    run_id: str
    agent: str
    step_id: str
    effect_key: str
    tool: str
    since: datetime
    waiting_seconds: float
    has_reconcile: bool
    tool_registered: bool
    proposal: Settlement | None  # an open proposal waiting for approval, if any


def team_run_ids(teams: Collection[str]) -> QuerySet[Run, Any]:
    """The ids of the runs of ``teams`` (a subquery: rows that name a run by id, not by a
    foreign key, are narrowed with ``run_id__in``)."""
    return Run.objects.filter(team__in=list(teams)).values("run_id")


def settlement_queue_steps(teams: Collection[str] | None = None) -> QuerySet[Step]:
    """Started effects of runs that no worker is executing, oldest first (uses the partial
    index on started steps). Runs blocked on reconciliation are all here: their blocking step
    is a started effect. Of the runs of ``teams`` (None: every team)."""
    started = scoped(
        Step.objects.filter(status=StepStatus.STARTED, kind=StepKind.EFFECT),
        teams,
        field="run__team",
    )
    return (
        started.exclude(run__status=RunStatus.RUNNING)
        .select_related("run")
        # A queue row shows neither the step's inputs and result nor the run's: the page
        # would otherwise carry every one of them out of the database to drop it.
        .defer("inputs", "result", "run__inputs", "run__result", "run__search_steps")
        .order_by("updated_at", "id")
    )


def settlement_queue(
    *,
    limit: int = 100,
    offset: int = 0,
    now: datetime | None = None,
    teams: Collection[str] | None = None,
) -> list[QueueItem]:
    """One page of the settlement queue, with each tool's read path and any open proposal
    (of the runs of ``teams``; None: every team)."""
    moment = now or timezone.now()
    steps = list(settlement_queue_steps(teams)[offset : offset + limit])
    proposals = {
        s.step_row_id: s
        for s in Settlement.objects.filter(
            step_row__in=steps, status=SettlementStatus.PROPOSED
        ).order_by("created_at")
    }
    items = []
    for step in steps:
        tool = registry.get_tool(step.tool)
        items.append(
            QueueItem(
                step=step,
                run=step.run,
                run_id=step.run_id,
                agent=step.run.agent,
                step_id=step.step_id,
                effect_key=step.effect_key or "",
                tool=step.tool,
                since=step.updated_at,
                waiting_seconds=max((moment - step.updated_at).total_seconds(), 0.0),
                has_reconcile=tool is not None and tool.reconcile is not None,
                tool_registered=tool is not None,
                proposal=proposals.get(step.pk),
            )
        )
    return items


@dataclass
class Evidence:
    """What a person needs to settle one step: the intent row, its inputs, the tool, the last
    lookup's answer, the proposals so far, and whether approval is required."""

    step: Step
    run: Run
    settleable: bool
    why_not: str
    tool_registered: bool
    has_reconcile: bool
    last_lookup: AuditEvent | None
    proposal: Settlement | None
    history: list[Settlement] = field(default_factory=list)
    approval_required: bool = True

    @property
    def lookup_answer(self) -> dict[str, Any]:
        return (self.last_lookup.after or {}) if self.last_lookup else {}


def settlement_evidence(*, step: Step) -> Evidence:
    row = Step.objects.select_related("run").get(pk=step.pk)
    tool = registry.get_tool(row.tool)
    why_not = ""
    if row.kind != StepKind.EFFECT or row.status != StepStatus.STARTED:
        why_not = f"this is a {row.status} {row.kind} step; only a started effect is settled"
    elif row.run.status == RunStatus.RUNNING:
        why_not = "a worker is executing this run right now"
    history = list(Settlement.objects.filter(step_row=row).order_by("-created_at"))
    lookups = AuditEvent.objects.filter(
        run_id=row.run_id, step_id=row.step_id, action=AuditAction.RECONCILE_LOOKUP
    )
    return Evidence(
        step=row,
        run=row.run,
        settleable=not why_not,
        why_not=why_not,
        tool_registered=tool is not None,
        has_reconcile=tool is not None and tool.reconcile is not None,
        last_lookup=lookups.order_by("-at", "-id").first(),
        proposal=next((s for s in history if s.status == SettlementStatus.PROPOSED), None),
        history=history,
        approval_required=approval_required(),
    )


def settlements_waiting(teams: Collection[str] | None = None) -> QuerySet[Settlement]:
    """Proposals waiting for an approver, oldest first (of ``teams``; None: every team)."""
    waiting = scoped(
        Settlement.objects.filter(status=SettlementStatus.PROPOSED), teams, field="run__team"
    )
    return waiting.select_related("run", "step_row").order_by("created_at", "id")


def settlement_is_outdated(settlement: Settlement) -> bool:
    """The step moved since the proposal: approving it would be refused."""
    return settlement.step_row.version != settlement.step_version


def audit_events(
    *,
    run_id: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    run_text: str | None = None,
    teams: Collection[str] | None = None,
) -> QuerySet[AuditEvent]:
    """The audit, newest first, filtered; paginate it with keyset or a Paginator.

    ``run_text`` is what a person typed to name a run: a whole run id, or part of one (with or
    without ``run_``), or words of its title, labels, … (the runs list's search): the events of
    the ``AUDIT_RUNS_MATCHED`` newest runs it matches. With ``teams`` (None: every team) only
    the events of those teams' runs (an event of no run, such as a pause or a schedule's,
    is for the roles that hold in every team).
    """
    events = AuditEvent.objects.select_related("settlement")
    if teams is not None:
        events = events.filter(run_id__in=team_run_ids(teams))
    if run_id:
        events = events.filter(run_id=run_id)
    if run_text:
        events = events.filter(run_id__in=runs_named(run_text))
    if actor:
        events = events.filter(actor=actor)
    if action:
        events = events.filter(action=action)
    if since:
        events = events.filter(at__gte=since)
    if until:
        events = events.filter(at__lt=until)
    return events.order_by("-at", "-id")


#: Runs an audit filter by run text looks at (the newest that match).
AUDIT_RUNS_MATCHED = 200


def runs_named(text: str, *, limit: int = AUDIT_RUNS_MATCHED) -> list[str]:
    """The ids of the runs ``text`` names: that run when it is a whole run id, else the newest
    ``limit`` runs the list's search finds for it (a part of an id, words of the title, …)."""
    text = text.strip()
    if not text:
        return []
    if queryable(text) and Run.objects.filter(pk=text).exists():
        return [text]
    found = (
        Run.objects.filter(search_condition(text))
        .order_by("-created_at", "-run_id")
        .values_list("run_id", flat=True)[:limit]
    )
    return list(found)


@dataclass(frozen=True)
class EditMark:
    """A step that ran before an upstream result was edited, and was not rewritten since."""

    step_id: str
    edited_step_id: str
    actor: str
    at: datetime
    event_id: int


def edited_upstream(*, run_id: str) -> dict[str, EditMark]:
    """Steps of the run that depend on an observation an admin edited (by step id)."""
    events = AuditEvent.objects.filter(run_id=run_id, action=AuditAction.STEP_ADMIN_EDIT)
    versions = dict(Step.objects.filter(run_id=run_id).values_list("step_id", "version"))
    marks: dict[str, EditMark] = {}
    for event in events.order_by("at", "id"):
        for step_id, version in (event.after or {}).get("downstream") or []:
            if versions.get(step_id) == version:
                marks[step_id] = EditMark(
                    step_id=step_id,
                    edited_step_id=event.step_id,
                    actor=event.actor,
                    at=event.at,
                    event_id=event.pk,
                )
    return marks


NOTIFICATION_STATUSES = ("pending", "sending", "sent", "failed")


def notifications_page(
    *,
    status: str = "",
    before_id: int | None = None,
    limit: int = 50,
    teams: Collection[str] | None = None,
) -> list[Notification]:
    """Notifications newest first (by id: the order they were written), optionally of one
    delivery status, starting before ``before_id`` (a keyset page); of the runs of ``teams``
    (None: every team)."""
    qs = Notification.objects.select_related("subscription").order_by("-id")
    if teams is not None:
        qs = qs.filter(run_id__in=team_run_ids(teams))
    if status in NOTIFICATION_STATUSES:
        qs = qs.filter(status=status)
    if before_id is not None:
        qs = qs.filter(id__lt=before_id)
    return list(qs[:limit])


def notifications_of_run(*, run_id: str, limit: int = 20) -> list[Notification]:
    """Who was told about this run, and when: its notifications, newest first."""
    rows = Notification.objects.filter(run_id=run_id).select_related("subscription")
    return list(rows.order_by("-id")[:limit])


def webhook_subscriptions(
    *,
    agent: str = "",
    run_id: str = "",
    removed: bool = False,
    teams: Collection[str] | None = None,
) -> list[WebhookSubscription]:
    """Applications' subscriptions to completion events, oldest first: the live ones (and the
    removed ones too with ``removed``), optionally of one agent or one run. ``teams`` (None:
    every team): only those teams' — an agent's subscription made for one of them, or a
    subscription of one of their runs (an agent's subscription for every team is none's)."""
    qs = WebhookSubscription.objects.order_by("id")
    if teams is not None:
        chosen = list(teams)
        runs = Run.objects.filter(team__in=chosen).values("run_id")
        qs = qs.filter((~Q(agent="") & Q(team__in=chosen)) | Q(run_id__in=runs))
    if not removed:
        qs = qs.filter(removed_at__isnull=True)
    if agent:
        qs = qs.filter(agent=agent)
    if run_id:
        qs = qs.filter(run_id=run_id)
    return list(qs)
