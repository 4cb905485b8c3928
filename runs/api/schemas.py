"""The API's bodies and answers (pydantic, through django-ninja). Request bodies refuse unknown
fields; answers say what a run, a step, an agent or a settlement is, with links."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from django.urls import reverse
from ninja import Schema
from pydantic import ConfigDict, Field

from ledger.api import RunState
from ledger.inputs import RUN_ID_PATTERN
from ledger.models import Run, Settlement, Step

RunStatusName = Literal["queued", "running", "needs_attention", "succeeded", "failed", "cancelled"]


class Strict(Schema):
    model_config = ConfigDict(extra="forbid")


def refuse_unknown_query(request: HttpRequest, model: type[Schema]) -> None:
    """A 422 problem for query parameters ``model`` does not declare (django-ninja drops them;
    a misspelt filter would silently list everything)."""
    from runs.api import problems

    unknown = sorted(set(request.GET) - set(model.model_fields))
    if unknown:
        errors = [
            {"path": f"query.{name}", "message": "unknown parameter", "type": "extra_forbidden"}
            for name in unknown
        ]
        raise problems.Problem(
            422,
            "validation",
            "Invalid request",
            "unknown query parameters: " + ", ".join(repr(n) for n in unknown),
            errors=errors,
        )


class StartIn(Strict):
    agent: str = Field(min_length=1, max_length=200, description="a registered agent's name")
    inputs: Any = Field(default_factory=dict, description="the run's inputs (JSON)")
    run_id: str | None = Field(
        default=None, pattern=f"^{RUN_ID_PATTERN}$", description="choose the run's id"
    )
    title: str | None = Field(default=None, max_length=200)
    labels: dict[str, str] | None = Field(default=None, description="text keys, text values")


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


class DecideIn(Strict):
    reason: str = Field(default="", max_length=4000)


class RejectIn(Strict):
    reason: str = Field(min_length=1, max_length=4000)


class RunLinks(Schema):
    self: str
    wait: str
    steps: str
    dashboard: str


class RunOut(Schema):
    run_id: str
    agent: str
    status: RunStatusName
    reason: str = Field(description="why a run needs attention ('' otherwise)")
    detail: str
    title: str
    labels: dict[str, str]
    inputs: Any
    result: Any = Field(description="the agent's return value once succeeded")
    error: str
    idempotency_key: str | None
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
    links: RunLinks

    @staticmethod
    def of(run: Run) -> RunOut:
        state = RunState.of(run)
        base = f"/api/v1/runs/{run.run_id}"
        return RunOut(
            **{f.name: getattr(state, f.name) for f in fields(state)},
            finished=state.finished,
            settled=state.settled,
            links=RunLinks(
                self=base,
                wait=f"{base}/wait",
                steps=f"{base}/steps",
                dashboard=reverse("runs:detail", args=[run.run_id]),
            ),
        )


class RunSummary(Schema):
    run_id: str
    agent: str
    status: RunStatusName
    reason: str
    title: str
    labels: dict[str, str]
    created_at: datetime
    status_changed_at: datetime

    @staticmethod
    def of(run: Run) -> RunSummary:
        return RunSummary(
            run_id=run.run_id,
            agent=run.agent,
            status=run.status,  # type: ignore[arg-type]
            reason=run.reason,
            title=run.title,
            labels=dict(run.labels or {}),
            created_at=run.created_at,
            status_changed_at=run.status_changed_at,
        )


class RunPageOut(Schema):
    runs: list[RunSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


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
