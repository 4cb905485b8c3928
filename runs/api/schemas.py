"""The API's bodies and answers (pydantic, through django-ninja). Request bodies refuse unknown
fields; answers say what a run, a step, an agent or a settlement is, with links."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.urls import reverse
from ninja import Schema
from pydantic import AwareDatetime, ConfigDict, Field

from ledger.api import MAX_BATCH, RunState
from ledger.inputs import RUN_ID_PATTERN
from ledger.models import Gate, Pause, Run, Schedule, Settlement, Step, WebhookSubscription
from ledger.selectors import AttemptFailure, ExecutionRow, attempt_failures
from ledger.selectors.usage import NONE as NO_USAGE
from ledger.selectors.usage import Usage, usage_of_run

RunStatusName = Literal[
    "queued", "running", "needs_attention", "paused", "succeeded", "failed", "cancelled"
]
#: Why a run needs attention, or why a failed run stopped (``deadline``); '' otherwise. A test
#: keeps both lists equal to the ledger's own (``ledger.states``).
ReasonName = Literal[
    "reconciliation",
    "stale",
    "divergence",
    "budget",
    "agent_missing",
    "approval",
    "question",
    "deadline",
]
EventName = Literal["run.succeeded", "run.failed", "run.cancelled", "run.needs_attention"]


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


def refuse_unknown_query(request: HttpRequest, model: type[Schema]) -> None:
    """A 422 problem for query parameters ``model`` does not declare (django-ninja drops them;
    a misspelt filter would silently list everything)."""
    from runs.api import problems

    unknown = sorted(set(request.GET) - set(model.model_fields))
    if unknown:
        errors = [
            {"path": name, "in": "query", "message": "unknown parameter", "type": "extra_forbidden"}
            for name in unknown
        ]
        raise problems.Problem(
            422,
            "validation",
            "Invalid request",
            "unknown query parameters: " + ", ".join(repr(n) for n in unknown),
            errors=errors,
        )


class RunWebhookIn(Strict):
    url: str = Field(min_length=1, max_length=2000, description="an http(s) URL to POST to")
    events: list[EventName] | None = Field(
        default=None, min_length=1, description="the events wanted (default: all four)"
    )
    description: str = Field(default="", max_length=200)


class WebhookIn(RunWebhookIn):
    agent: str | None = Field(
        default=None, min_length=1, max_length=200, description="every run of this agent"
    )
    run_id: str | None = Field(
        default=None, pattern=f"^{RUN_ID_PATTERN}$", description="or this one run"
    )
    team: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="with `agent`: only this team's runs of it (default: the token's team; a "
        "token that reaches every team may leave it out for every team's runs)",
    )


class StartIn(Strict):
    agent: str = Field(min_length=1, max_length=200, description="a registered agent's name")
    inputs: Any = Field(default_factory=dict, description="the run's inputs (JSON)")
    run_id: str | None = Field(
        default=None, pattern=f"^{RUN_ID_PATTERN}$", description="choose the run's id"
    )
    team: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="the team the run belongs to (default: the token's team, else the agent's "
        "declared team, else RUNLEDGER_DEFAULT_TEAM); a token may start runs only in a team it "
        "reaches (403 otherwise)",
    )
    title: str | None = Field(default=None, max_length=200)
    labels: dict[str, str] | None = Field(default=None, description="text keys, text values")
    webhooks: list[RunWebhookIn] | None = Field(
        default=None,
        max_length=10,
        description="subscribe URLs to this run's completion events, in the start's own "
        "transaction (each secret is in the 201 answer, once); a repeated start subscribes "
        "nothing again",
    )
    concurrency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="at most `concurrency_limit` runs with this key execute at once across "
        "the fleet; the others wait queued (default: the key the agent declares, if any)",
    )
    concurrency_limit: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="how many runs of `concurrency_key` may execute at once (default: the "
        "agent's declared limit, else 1)",
    )
    priority: int | None = Field(
        default=None,
        ge=0,
        le=9,
        description="0 (the default) to 9: a queued run of higher priority is taken before "
        "older ones of lower priority, aged so that none starves",
    )
    start_at: AwareDatetime | None = Field(
        default=None,
        description="queued now, not executed before this time (with its zone; at most "
        "RUNLEDGER_MAX_START_DELAY_DAYS ahead)",
    )
    deadline: float | AwareDatetime | None = Field(
        default=None,
        description="seconds from the start (more than 0), or a time with its zone: past it the "
        "run stops before its next step, failed with reason `deadline`",
    )


class StartItemIn(StartIn):
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="this run's idempotency key (the `Idempotency-Key` header of a single start)",
    )


class StartBatchIn(Strict):
    runs: list[StartItemIn] = Field(
        min_length=1,
        max_length=MAX_BATCH,
        description=f"1 to {MAX_BATCH} runs to start, each as the body of `POST /runs` plus its "
        "own `idempotency_key`",
    )


class EventIn(Strict):
    name: str = Field(
        min_length=1,
        max_length=200,
        description="the name the agent waits for (ctx.wait_for_event)",
    )
    payload: Any = Field(default=None, description="the event's payload (JSON)")
    event_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="makes the send idempotent: the same id with the same name and payload is "
        "the same event (200); with another name or payload a conflict (409). Without one, "
        "every request is a new event",
    )


class EventOut(Schema):
    run_id: str
    event_id: str
    name: str
    payload: Any
    created: bool = Field(description="false when this event id was sent before")
    created_at: datetime
    consumed_step_id: str = Field(description="the step that took it; empty while it waits")
    consumed_at: datetime | None


class AnswerIn(Strict):
    answer: Any = Field(description="the answer (JSON), valid against the question's schema")
    reason: str = Field(default="", max_length=4000, description="a note, audited with it")


class ReasonIn(Strict):
    reason: str = Field(min_length=1, max_length=4000, description="why (audited)")
    seen_version: int | None = Field(
        default=None, ge=0, description="the run version you acted on; refused (409) if it moved"
    )


class ResumeIn(ReasonIn):
    max_resumes: int | None = Field(
        default=None, ge=0, le=1_000_000, description="raise the resume budget (never lower)"
    )


class ProposeIn(Strict):
    outcome: Literal["happened", "not_happened", "abandon"]
    reason: str = Field(min_length=1, max_length=4000)
    seen_version: int = Field(ge=0, description="the step's version you looked at")
    result: Any = Field(default=None, description="the downstream result (for happened)")


class PauseIn(Strict):
    scope: Literal["tool", "agent", "run"]
    target: str = Field(min_length=1, max_length=200, description="the tool, agent or run id")
    reason: str = Field(min_length=1, max_length=4000, description="why (audited)")
    expires_at: datetime | None = Field(
        default=None,
        description="when the pause lifts itself (the sweep lifts it, audited): in the future, "
        "at most a year away; none: a person lifts it",
    )


class LiftIn(Strict):
    reason: str = Field(min_length=1, max_length=4000, description="why (audited)")
    expected: int = Field(
        ge=0,
        le=10**9,
        description="the count of held runs you were shown (`held`); refused (409) if it moved",
    )


class AcceptStaleIn(Strict):
    reason: str = Field(min_length=1, max_length=4000, description="why (audited)")
    seen_version: int | None = Field(
        default=None, ge=0, description="the step's version you looked at; 409 if it moved"
    )
    resume: bool = Field(default=True, description="queue the run when it is stopped on this step")


class DecideIn(Strict):
    reason: str = Field(default="", max_length=4000)


class RejectIn(Strict):
    reason: str = Field(min_length=1, max_length=4000)


class RunLinks(Schema):
    self: str
    wait: str
    steps: str
    executions: str
    dashboard: str


class UsageOut(Schema):
    """Tokens and cost of a run's (or an agent's) model steps (``ledger.usage``)."""

    tokens_in: int = Field(description="input tokens, as the model's answers report them")
    tokens_out: int = Field(description="output tokens")
    cost_usd: float | None = Field(
        description="US dollars at the price table (RUNLEDGER_MODEL_PRICES) when each step was "
        "recorded; null when no step's model has a price"
    )
    model_steps: int
    unpriced: int = Field(description="model steps with tokens whose model has no price")

    @staticmethod
    def of(usage: Usage) -> UsageOut:
        return UsageOut(**usage.as_dict())  # type: ignore[arg-type]


class RunOut(Schema):
    run_id: str
    agent: str
    team: str = Field(description="the team the run belongs to: who may see and act on it")
    status: RunStatusName
    reason: str = Field(description="why a run needs attention ('' otherwise)")
    detail: str
    title: str
    labels: dict[str, str]
    inputs: Any
    result: Any = Field(description="the agent's return value once succeeded")
    error: str
    idempotency_key: str | None
    concurrency_key: str = Field(description="the run's concurrency key ('' for none)")
    concurrency_limit: int = Field(description="runs of that key that may execute at once")
    priority: int = Field(description="0 to 9: higher is taken first")
    not_before: datetime | None = Field(
        description="not executed before this time: its start_at, or a retry's back-off"
    )
    deadline_at: datetime | None = Field(description="past it the run stops, failed (deadline)")
    schedule: str = Field(description="the schedule whose tick started the run ('' for none)")
    plan_version: str
    resume_count: int
    max_resumes: int
    version: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    finished: bool
    settled: bool = Field(description="finished, or stopped until a person acts")
    usage: UsageOut
    links: RunLinks

    @staticmethod
    def of(run: Run, usage: Usage | None = None) -> RunOut:
        """``usage``: the run's, when the caller read it with others' (else read here)."""
        state = RunState.of(run)
        base = f"/api/v1/runs/{run.run_id}"
        return RunOut(
            **{f.name: getattr(state, f.name) for f in fields(state) if f.name != "team"},
            team=run.team,
            finished=state.finished,
            settled=state.settled,
            usage=UsageOut.of(usage if usage is not None else usage_of_run(run_id=run.run_id)),
            links=RunLinks(
                self=base,
                wait=f"{base}/wait",
                steps=f"{base}/steps",
                executions=f"{base}/executions",
                dashboard=reverse("runs:detail", args=[run.run_id]),
            ),
        )


class RunSummary(Schema):
    run_id: str
    agent: str
    team: str
    status: RunStatusName
    reason: str
    title: str
    labels: dict[str, str]
    created_at: datetime
    status_changed_at: datetime
    usage: UsageOut

    @staticmethod
    def of(run: Run, usage: Usage = NO_USAGE) -> RunSummary:
        return RunSummary(
            run_id=run.run_id,
            agent=run.agent,
            team=run.team,
            status=run.status,  # type: ignore[arg-type]
            reason=run.reason,
            title=run.title,
            labels=dict(run.labels or {}),
            created_at=run.created_at,
            status_changed_at=run.status_changed_at,
            usage=UsageOut.of(usage),
        )


class RunPageOut(Schema):
    runs: list[RunSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class AttemptFailureOut(Schema):
    """One failed attempt of a step (``ledger.selectors.AttemptFailure``)."""

    step_id: str
    attempt: int | None
    at: datetime | None
    type: str = Field(description="the exception's type")
    message: str
    traceback: str = Field(description="size-capped; the agent's and tools' frames")
    retry_at: datetime | None = Field(description="when the next attempt is due; None if final")
    retry_after: float | None = Field(description="seconds the tool asked to wait, if it did")
    final: bool = Field(description="the step gave up after this attempt")
    why: str

    @staticmethod
    def of(failure: AttemptFailure) -> AttemptFailureOut:
        return AttemptFailureOut(**failure.as_dict())


class StepOut(Schema):
    id: int = Field(description="the row's id (settlements name it)")
    step_id: str
    seq: int
    kind: str
    tool: str
    status: str
    attempt: int
    version: int
    effect_key: str | None
    result: Any
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    model_id: str = Field(description="a model step's model ('' otherwise)")
    tokens_in: int | None = Field(description="a model step's input tokens, if reported")
    tokens_out: int | None
    cost_usd: float | None = Field(description="a model step's cost, if its model has a price")
    failures: list[AttemptFailureOut] = Field(description="its failed attempts, oldest first")

    @staticmethod
    def of(step: Step) -> StepOut:
        return StepOut(
            id=step.pk,
            step_id=step.step_id,
            seq=step.seq,
            kind=step.kind,
            tool=step.tool,
            status=step.status,
            attempt=step.attempt,
            version=step.version,
            effect_key=step.effect_key,
            result=step.result,
            error=step.error,
            started_at=step.started_at,
            finished_at=step.finished_at,
            model_id=step.model_id,
            tokens_in=step.tokens_in,
            tokens_out=step.tokens_out,
            cost_usd=float(step.cost_usd) if step.cost_usd is not None else None,
            failures=[AttemptFailureOut.of(f) for f in attempt_failures(step.step_id, step.errors)],
        )


class StepPageOut(Schema):
    steps: list[StepOut]
    next_cursor: str | None = Field(description="pass as ?after= for the next page")


class AgentOut(Schema):
    name: str
    description: str
    requires: list[str]
    plan_version: str
    divergence: str
    tools: list[str]


class AgentUsageOut(Schema):
    agent: str
    runs: int = Field(description="runs with model steps recorded in the window")
    usage: UsageOut


class AgentUsagePageOut(Schema):
    window: str
    since: datetime
    until: datetime
    agents: list[AgentUsageOut] = Field(description="most costly first")
    total: AgentUsageOut


class SettlementOut(Schema):
    id: int
    run_id: str
    step: int = Field(description="the step row's id")
    step_id: str
    effect_key: str
    outcome: str
    result: Any
    reason: str
    status: str
    approval_required: bool
    proposed_by: str
    decided_by: str
    decided_at: datetime | None
    created_at: datetime

    @staticmethod
    def of(s: Settlement) -> SettlementOut:
        return SettlementOut(
            id=s.pk,
            run_id=s.run_id,
            step=s.step_row_id,
            step_id=s.step_id,
            effect_key=s.effect_key,
            outcome=s.outcome,
            result=s.result,
            reason=s.reason,
            status=s.status,
            approval_required=s.approval_required,
            proposed_by=s.proposed_by_name,
            decided_by=s.decided_by_name,
            decided_at=s.decided_at,
            created_at=s.created_at,
        )


class WaitingEffectOut(Schema):
    run_id: str
    step: int
    step_id: str
    step_version: int
    tool: str
    effect_key: str
    since: datetime
    proposal: SettlementOut | None


class ExecutionOut(Schema):
    """One execution of a run, claim to end (``ledger.selectors.run_executions``)."""

    number: int
    worker: str
    host: str
    pid: int | None
    task_id: str
    started_at: datetime
    ended_at: datetime | None
    seconds: float | None
    ending: str = Field(description="running, finished, needs_attention, paused, failed, …")
    ending_label: str
    reason: str
    step_id: str = Field(description="the step it stopped at, if it stopped")
    replayed: int = Field(description="steps replayed from the ledger")
    executed: int = Field(description="steps executed")
    error: str

    @staticmethod
    def of(row: ExecutionRow) -> ExecutionOut:
        return ExecutionOut(
            **{f.name: getattr(row, f.name) for f in fields(row)},
            seconds=row.seconds,
            ending_label=row.ending_label,
        )


class GateOut(Schema):
    """An approval gate: the exact canonical arguments the tool receives once approved, and
    their digest (what the approval binds)."""

    id: int
    run_id: str
    step_id: str
    tool: str
    status: Literal["waiting", "approved", "used", "rejected", "void"]
    arguments: Any = Field(description="the arguments, parsed from `arguments_text`")
    arguments_text: str = Field(description="the exact canonical JSON the tool receives")
    digest: str = Field(description="the SHA-256 input hash the approval binds")
    approvers_required: int
    approved_by: list[str]
    on_reject: Literal["raise", "fail"]
    created_at: datetime
    expires_at: datetime
    decided_by: str
    decided_at: datetime | None
    decision_reason: str
    used_at: datetime | None
    void_reason: str
    run_status: RunStatusName
    links: dict[str, str]

    @staticmethod
    def of(gate: Gate) -> GateOut:
        return GateOut(
            id=gate.pk,
            run_id=gate.run_id,
            step_id=gate.step_id,
            tool=gate.tool,
            status=gate.status,  # type: ignore[arg-type]
            arguments=json.loads(gate.arguments_text),
            arguments_text=gate.arguments_text,
            digest=gate.digest,
            approvers_required=gate.approvers_required,
            approved_by=list(gate.approved_by),
            on_reject=gate.on_reject,  # type: ignore[arg-type]
            created_at=gate.created_at,
            expires_at=gate.expires_at,
            decided_by=gate.decided_by_name,
            decided_at=gate.decided_at,
            decision_reason=gate.decision_reason,
            used_at=gate.used_at,
            void_reason=gate.void_reason,
            run_status=gate.run.status,  # type: ignore[arg-type]
            links={
                "self": f"/api/v1/approvals/{gate.pk}",
                "run": f"/api/v1/runs/{gate.run_id}",
                "dashboard": reverse("runs:approval", args=[gate.pk]),
            },
        )


class PauseOut(Schema):
    id: int
    scope: Literal["tool", "agent", "run"]
    target: str
    reason: str
    created_by: str
    created_at: datetime
    active: bool
    held: int = Field(description="the runs it holds now (a lift queues them): pass as expected")
    lifted_by: str
    lifted_at: datetime | None
    lift_reason: str
    requeued: int = Field(description="the runs its lift queued")
    expires_at: datetime | None = Field(description="when it lifts itself (none: a person does)")

    @staticmethod
    def of(pause: Pause, *, held: int) -> PauseOut:
        return PauseOut(
            id=pause.pk,
            scope=pause.scope,  # type: ignore[arg-type]
            target=pause.target,
            reason=pause.reason,
            created_by=pause.created_by,
            created_at=pause.created_at,
            active=pause.lifted_at is None,
            held=held,
            lifted_by=pause.lifted_by,
            lifted_at=pause.lifted_at,
            lift_reason=pause.lift_reason,
            requeued=pause.requeued,
            expires_at=pause.expires_at,
        )


class WebhookOut(Schema):
    """A subscription to completion events (its secret is shown only when it is made)."""

    id: int
    url: str
    agent: str
    run_id: str
    team: str = Field(
        description="an agent's subscription: only this team's runs of it ('' every team's)"
    )
    events: list[str]
    description: str
    created_by: str
    created_at: datetime
    removed_by: str
    removed_at: datetime | None

    @staticmethod
    def of(s: WebhookSubscription) -> WebhookOut:
        return WebhookOut(
            id=s.pk,
            url=s.url,
            agent=s.agent,
            run_id=s.run_id,
            team=s.team,
            events=list(s.events),
            description=s.description,
            created_by=s.created_by,
            created_at=s.created_at,
            removed_by=s.removed_by,
            removed_at=s.removed_at,
        )


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(
        description="the signing secret (whsec_…): shown this once; verify deliveries with it"
    )


class StartedOut(RunOut):
    created: bool = Field(
        description="true when this start made the run (201); false when the run id or "
        "`Idempotency-Key` named a run an identical start made already (200), which is "
        "answered as it is: its title and labels are those of its first start"
    )
    webhooks: list[WebhookCreatedOut] = Field(
        description="the per-run subscriptions this start made, with their secrets (empty on "
        "a repeat: an identical start subscribes nothing again)"
    )


class StartedBatchOut(Schema):
    runs: list[StartedOut] = Field(
        description="one per run asked for, in the same order; `created` false where an "
        "identical earlier start (in an earlier request or earlier in this batch) made the run"
    )


class StaleAcceptedOut(Schema):
    run: RunOut
    step: StepOut


class ScheduleIn(Strict):
    """A schedule: exactly one of `cron` and `interval`."""

    name: str = Field(
        min_length=1,
        max_length=100,
        description="what commands and pages call it (letters, digits, '.', '_', '-')",
    )
    agent: str = Field(min_length=1, max_length=200, description="a registered agent's name")
    team: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description="the team of the schedule and of the runs it starts (default: the token's "
        "team, else the agent's declared team, else RUNLEDGER_DEFAULT_TEAM); 403 for a team "
        "the token may not operate in",
    )
    inputs: Any = Field(default_factory=dict, description="each run's inputs (JSON)")
    cron: str | None = Field(
        default=None, max_length=200, description="five fields, e.g. `0 3 * * *`, or `@daily`"
    )
    interval: int | None = Field(
        default=None, description="seconds (1 to a year), ticking on the Unix epoch's grid"
    )
    timezone: str = Field(default="UTC", max_length=64, description="the cron's IANA time zone")
    missed: Literal["skip", "once", "each"] = Field(
        default="skip",
        description="ticks missed while no pass ran: start nothing for them, one run for the "
        "latest, or one run each (at most 100, the newest)",
    )
    priority: int | None = Field(default=None, description="each run's priority (0 to 9)")
    concurrency_key: str | None = Field(default=None, max_length=200)
    concurrency_limit: int | None = Field(default=None)
    deadline: float | None = Field(
        default=None, description="each run stops, failed (deadline), this many seconds after it"
    )
    description: str = Field(default="", max_length=200)
    reason: str = Field(default="", max_length=4000, description="why (audited)")


class ScheduleChangeIn(Strict):
    reason: str = Field(default="", max_length=4000, description="why (audited)")


class ScheduleOut(Schema):
    id: str = Field(description="`sch_…`: the runs it started hold it (`GET /runs?schedule=`)")
    name: str
    description: str
    agent: str
    team: str = Field(description="the team of the schedule and of the runs it starts")
    inputs: Any
    cron: str | None
    interval: int | None
    timezone: str
    missed: Literal["skip", "once", "each"]
    priority: int | None
    concurrency_key: str | None
    concurrency_limit: int | None
    deadline: float | None
    next_at: datetime | None = Field(description="its next tick (None while paused or removed)")
    paused: bool
    paused_by: str
    last_tick_at: datetime | None
    last_run_id: str
    last_error: str = Field(description="what the last pass could not start ('' for nothing)")
    ticks_skipped: int = Field(description="due ticks that started no run (the missed policy)")
    created_by: str
    created_at: datetime
    removed: bool
    removed_by: str
    removed_at: datetime | None

    @staticmethod
    def of(s: Schedule) -> ScheduleOut:
        live = s.removed_at is None and s.paused_at is None
        return ScheduleOut(
            id=s.schedule_id,
            name=s.name,
            description=s.description,
            agent=s.agent,
            team=s.team,
            inputs=s.inputs,
            cron=s.cron or None,
            interval=s.interval_seconds or None,
            timezone=s.timezone,
            missed=s.missed,  # type: ignore[arg-type]
            priority=s.priority,
            concurrency_key=s.concurrency_key or None,
            concurrency_limit=s.concurrency_limit,
            deadline=s.deadline_seconds,
            next_at=s.next_at if live else None,
            paused=s.paused_at is not None,
            paused_by=s.paused_by,
            last_tick_at=s.last_tick_at,
            last_run_id=s.last_run_id,
            last_error=s.last_error,
            ticks_skipped=s.ticks_skipped,
            created_by=s.created_by,
            created_at=s.created_at,
            removed=s.removed_at is not None,
            removed_by=s.removed_by,
            removed_at=s.removed_at,
        )
