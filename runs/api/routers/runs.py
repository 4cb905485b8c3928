"""Runs: start (idempotent, optionally subscribing webhooks, optionally waiting for it to
settle), read, list, wait for, follow the stream of (Server-Sent Events), read the steps (with
their failed attempts) and executions of, resume, retry, cancel, accept a stale step, send an
event to."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Literal

from django.db.models import Q
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from ninja import Header, Query, Router, Status
from pydantic import Field

from ledger import api as ledger_api
from ledger import registry, selectors, transitions
from ledger.errors import InvalidInput
from ledger.inputs import queryable
from ledger.models import Run, Step
from ledger.processes import resume as resume_process
from ledger.processes import stale
from ledger.selectors.usage import NONE as NO_USAGE
from ledger.selectors.usage import usage_of_runs
from ledger.teams import default_team
from ledger.waiting import SETTLED
from runs.api import problems, sse
from runs.api.auth import actor, check_reach, reach, require, token_of
from runs.api.problems import ProblemOut
from runs.api.schemas import (
    AcceptStaleIn,
    AnswerIn,
    EventIn,
    EventOut,
    ExecutionOut,
    ReasonIn,
    ReasonName,
    ResumeIn,
    RunOut,
    RunPageOut,
    RunStatusName,
    RunSummary,
    StaleAcceptedOut,
    StartBatchIn,
    StartedBatchOut,
    StartedOut,
    StartIn,
    StepOut,
    StepPageOut,
    Strict,
    WebhookCreatedOut,
    WebhookOut,
    refuse_unknown_query,
)
from runs.dashboard.roles import RANKS, role_of
from runs.dashboard.teams import team_roles

router = Router(tags=["runs"])

MAX_WAIT_SECONDS = 60
REFUSALS: dict[int, type] = {
    400: ProblemOut,
    401: ProblemOut,
    403: ProblemOut,
    404: ProblemOut,
    409: ProblemOut,
    413: ProblemOut,
    422: ProblemOut,
    429: ProblemOut,
    503: ProblemOut,
}


def run_or_404(request: HttpRequest, run_id: str, action: str = "read") -> Run:
    """The run, when the request's token may read its team (else 404, as for a run that does
    not exist) and do ``action`` there (else 403): ``runs.api.auth.check_reach``."""
    if not queryable(run_id) or len(run_id) > 64:
        raise problems.not_found(f"no run {run_id[:80]!r}")
    try:
        run = selectors.run_detail(run_id=run_id)
    except Run.DoesNotExist:
        raise problems.not_found(f"no run {run_id!r}") from None
    check_reach(request, run, action, f"no run {run_id!r}")
    return run


def named_run(request: HttpRequest, run_id: str, action: str, missing: str) -> None:
    """A run a body names (a run's pause, a run's subscription): when it exists but is out of
    the token's reach, the very refusal the transition gives a run that does not exist (422
    ``missing``: its existence is not told); 403 when readable but ``action`` is not allowed
    there. A run that does not exist is left to the transition to refuse."""
    run = Run.objects.filter(pk=run_id).only("team").first() if queryable(run_id) else None
    if run is None:
        return
    token = token_of(request)
    if not token.may("read", run):
        raise problems.refusal(InvalidInput(missing))
    check_reach(request, run, action, missing)


def start_team(request: HttpRequest, team: str | None) -> str | None:
    """The team a start through the API names: the body's ``team`` (403 when the token may not
    start runs there), else the token's own team (a team token), else None (the agent's)."""
    token = token_of(request)
    if team is None:
        return token.team or None
    check_team_or_422(team)
    if not token.may("start", team):
        raise problems.forbidden(
            f"this token may not start runs in the team {team!r}"
            + (f" (it is team {token.team}'s)" if token.team else "")
        )
    return team


def check_team_or_422(team: str) -> None:
    from ledger.teams import is_team

    if not is_team(team):
        raise problems.Problem(
            422,
            "invalid-input",
            "Invalid input",
            "team: 1 to 63 characters from a-z 0-9 _ - starting with a letter or a digit",
        )


def step_or_404(run: Run, pk: int) -> Step:
    try:
        return selectors.step_of_run(run_id=run.run_id, pk=pk)
    except Step.DoesNotExist:
        raise problems.not_found(f"run {run.run_id!r} has no step #{pk}") from None


@router.post(
    "/runs",
    response={200: StartedOut, 201: StartedOut, **REFUSALS},
    summary="Start a run (idempotent)",
    description="201 with the new run (`created` true); 200 with the same run (`created` "
    "false) when the run id or the `Idempotency-Key` was used with the same agent and inputs "
    "(a title or labels are not compared: the run keeps those of its first start); 409 when "
    "they were used with another agent or other inputs (the problem says what differs). "
    "`labels` are added to the labels the agent declares (made from the inputs); on the same "
    "key the start's value wins. `webhooks` subscribes URLs to this run's "
    "completion events in the start's own transaction; their secrets are in the 201 answer, "
    "once, and a repeat (200) subscribes nothing again. With `?wait=<seconds>` (at most 60) "
    "the answer comes once the run settled (`settled` true) or the wait ended (`settled` "
    "false: follow it with `GET /runs/{run_id}/wait`). "
    "`concurrency_key` (and "
    "`concurrency_limit`, default 1) hold the run queued while that many runs of the key "
    "execute; its `detail` says so (`waiting: 1 of 1 running for customer cus_42`). "
    "`priority` (0 to 9) puts it ahead of older queued runs of lower priority; `start_at` "
    "holds it queued until then; past its `deadline` it stops, failed with reason `deadline`.",
)
def start(
    request: HttpRequest,
    body: StartIn,
    idempotency_key: str | None = Header(
        default=None, alias="Idempotency-Key", min_length=1, max_length=200
    ),
    wait: float | None = Query(
        default=None,
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="start and wait: answer once the run settles (succeeded, failed, "
        "cancelled, needs attention) or after this many seconds (≤ 60), whichever is first",
    ),
) -> Status[StartedOut]:
    token = require(request, "start")
    team = _item_team(request, body.agent, body.team)
    _refuse_foreign_repeats(
        request, [body.run_id] if body.run_id else [], [idempotency_key] if idempotency_key else []
    )
    try:
        handle = ledger_api.start_run(
            body.agent,
            body.inputs,
            run_id=body.run_id,
            idempotency_key=idempotency_key,
            title=body.title,
            labels=body.labels,
            by=actor(token),
            reason=f"started through the API (token {token.name})",
            webhooks=[w.model_dump() for w in body.webhooks] if body.webhooks else None,
            concurrency_key=body.concurrency_key,
            concurrency_limit=body.concurrency_limit,
            priority=body.priority,
            start_at=body.start_at,
            deadline=body.deadline,
            team=team,
        )
    except (ledger_api.UnknownAgent, transitions.OperationError) as exc:
        raise problems.refusal(exc) from exc
    # A repeat answers the run of the first start: only when this token may read its team.
    run = run_or_404(request, handle.run_id)
    made = [
        WebhookCreatedOut(**WebhookOut.of(sub).model_dump(), secret=secret)
        for sub, secret in handle.subscriptions
    ]
    if wait:
        handle.wait(timeout=wait)  # the run is committed: the wait reads it as a worker moves it
        run = run_or_404(request, handle.run_id)
    answer = StartedOut(**RunOut.of(run).model_dump(), created=handle.created, webhooks=made)
    return Status(201 if handle.created else 200, answer)


@router.post(
    "/runs/batch",
    response={200: StartedBatchOut, 201: StartedBatchOut, **REFUSALS},
    summary="Start many runs (idempotent, one transaction)",
    description="Up to 1,000 runs, each as the body of `POST /runs` with its own "
    "`idempotency_key`, written in one transaction and sent to the workers in one publish. "
    "The answer lists each run in the order asked, with `created` (false where an identical "
    "earlier start, in an earlier request or earlier in this batch, made it): 201 when the "
    "batch made at least one run, 200 when every item was a repeat. One bad item refuses the "
    "whole batch and nothing is written: 409 when every bad item is a conflict (its id or key "
    "was used with other values), else 422; the problem's `errors` lists each bad item "
    "(`index`, `type`: invalid | unknown-agent | conflict, `message`, `current`). A body that "
    "is not a list of 1 to 1,000 runs, or whose items do not validate, is a 422 "
    "(`errors[].path` names the item: `runs[3].run_id`).",
)
def start_batch(request: HttpRequest, body: StartBatchIn) -> Status[StartedBatchOut]:
    token = require(request, "start")
    items = [
        {
            **item.model_dump(exclude_none=True, exclude={"webhooks", "team"}),
            "webhooks": [w.model_dump() for w in item.webhooks] if item.webhooks else None,
            "team": _item_team(request, item.agent, item.team),
        }
        for item in body.runs
    ]
    _refuse_foreign_repeats(
        request,
        [i["run_id"] for i in items if i.get("run_id")],
        [i["idempotency_key"] for i in items if i.get("idempotency_key")],
    )
    try:
        handles = ledger_api.start_runs(
            items, by=actor(token), reason=f"started through the API (token {token.name})"
        )
    except ledger_api.BatchRefused as exc:
        status = 409 if exc.conflicts_only else 422
        errors = [e.as_dict() for e in exc.errors]
        raise problems.Problem(
            status, "batch-refused", "Batch refused", str(exc), errors=errors
        ) from exc
    except (ledger_api.UnknownAgent, transitions.OperationError) as exc:
        raise problems.refusal(exc) from exc
    rows = {r.run_id: r for r in selectors.runs_by_ids(run_ids=[h.run_id for h in handles])}
    used = usage_of_runs(run_ids=rows)
    answer = [
        StartedOut(
            **RunOut.of(rows[h.run_id], used.get(h.run_id, NO_USAGE)).model_dump(),
            created=h.created,
            webhooks=[
                WebhookCreatedOut(**WebhookOut.of(sub).model_dump(), secret=secret)
                for sub, secret in h.subscriptions
            ],
        )
        for h in handles
    ]
    made = any(h.created for h in handles)
    return Status(201 if made else 200, StartedBatchOut(runs=answer))


def _item_team(request: HttpRequest, agent: str, team: str | None) -> str:
    """A batch item's team, as a single start decides it (403 for a team out of reach)."""
    chosen = start_team(request, team)
    if chosen is None:
        found = registry.get_agent(agent)
        chosen = (found.team if found is not None else "") or default_team()
        if not token_of(request).may("start", chosen):
            raise problems.forbidden(
                f"a run of {agent!r} that names no team is in the team {chosen!r}, where this "
                "token may not start runs: name a team"
            )
    return chosen


def _refuse_foreign_repeats(request: HttpRequest, run_ids: list[str], keys: list[str]) -> None:
    """404 when a run id a start names is another team's run's (out of the token's reach), 409
    when an idempotency key is: a start never answers a run the token may not read."""
    if not run_ids and not keys:
        return
    teams = reach(request)
    if teams is None:
        return
    found = Run.objects.filter(Q(pk__in=run_ids) | Q(idempotency_key__in=keys)).exclude(
        team__in=list(teams)
    )
    hidden = found.values_list("run_id", flat=True).first()
    if hidden is None:
        return
    if hidden in run_ids:
        raise problems.not_found(f"no run {hidden!r}")
    raise problems.Problem(
        409,
        "conflict",
        "Conflict",
        "an idempotency key of this start was used by a start out of this token's teams: "
        "choose another key",
    )


class ListQuery(Strict):
    team: str | None = Field(default=None, max_length=63, description="only this team's runs")
    status: RunStatusName | Literal["lease_expired"] | None = None
    reason: ReasonName | None = Field(default=None, description="why it needs attention")
    agent: str | None = Field(default=None, max_length=200)
    schedule: str | None = Field(
        default=None, max_length=64, description="the runs a schedule started (its id, sch_…)"
    )
    older_than: int | None = Field(
        default=None, ge=0, le=10 * 365 * 86400, description="seconds in the current state"
    )
    search: str | None = Field(
        default=None, max_length=200, description="a run id prefix, key:value label, or title"
    )
    order: Literal["newest", "oldest"] = "newest"
    cursor: str | None = Field(default=None, max_length=400)
    limit: int = Field(default=50, ge=1, le=200)


@router.get("/runs", response={200: RunPageOut, **REFUSALS}, summary="List runs")
def list_runs(request: HttpRequest, q: Query[ListQuery]) -> RunPageOut:
    """The dashboard's filters; newest first (or longest in its state first), a page at a time
    (keyset: a cursor, never an offset)."""
    require(request, "read")
    refuse_unknown_query(request, ListQuery)
    for text in (q.agent, q.search, q.schedule, q.team):
        if text is not None and not queryable(text):
            raise problems.Problem(422, "invalid-input", "Invalid input", "no NUL bytes, please")
    after = None
    if q.cursor:
        try:
            after = selectors.Cursor.decode(q.cursor)
        except ValueError:
            raise problems.Problem(
                422, "invalid-input", "Invalid input", "cursor: not a page cursor of this API"
            ) from None
    flt = selectors.RunFilter(
        status=q.status or "",
        reason=q.reason or "",
        agent=q.agent or "",
        schedule=q.schedule or "",
        older_than=timedelta(seconds=q.older_than) if q.older_than is not None else None,
        search=q.search or "",
        order=q.order,
    )
    teams = reach(request)
    if q.team is not None:
        teams = frozenset({q.team}) if teams is None else teams & {q.team}
    page = selectors.runs_page(flt=flt, now=timezone.now(), after=after, limit=q.limit, teams=teams)
    used = usage_of_runs(run_ids=[r.run_id for r in page.runs])
    return RunPageOut(
        runs=[RunSummary.of(r, used.get(r.run_id, NO_USAGE)) for r in page.runs],
        next_cursor=page.next_cursor.encode() if page.next_cursor else None,
    )


@router.get("/runs/{run_id}", response={200: RunOut, **REFUSALS}, summary="Read a run")
def get_run(request: HttpRequest, run_id: str) -> RunOut:
    require(request, "read")
    return RunOut.of(run_or_404(request, run_id))


class WaitQuery(Strict):
    timeout: float = Field(
        default=30, ge=0, le=MAX_WAIT_SECONDS, description="seconds to wait at most (≤ 60)"
    )


@router.get(
    "/runs/{run_id}/wait",
    response={200: RunOut, **REFUSALS},
    summary="Wait for a run to finish or stop for a person",
    description="Long-poll: answers as soon as the run succeeded, failed, was cancelled or "
    "needs attention (`settled` true), or after `timeout` seconds with the run as it is "
    "(`settled` false: ask again).",
)
def wait(request: HttpRequest, run_id: str, q: Query[WaitQuery]) -> RunOut:
    require(request, "read")
    refuse_unknown_query(request, WaitQuery)
    run = run_or_404(request, run_id)
    if run.status not in SETTLED:
        ledger_api.RunHandle(run.run_id).wait(timeout=q.timeout)
        run = run_or_404(request, run_id)
    return RunOut.of(run)


class StreamQuery(Strict):
    live: bool = Field(
        default=False,
        description="also the model's text as it arrives (`event: delta`, no id, not stored)",
    )


@router.get(
    "/runs/{run_id}/stream",
    response={200: None, **REFUSALS},
    summary="Follow the run's stream (Server-Sent Events)",
    description="`text/event-stream` of the events the agent emits (`ctx.emit`), each once, "
    'in order: `id: <event id>` and `data: {"id", "kind", "data", "step_id", '
    '"at"}`. Resumable: send `Last-Event-ID` (the id of the last event seen) and the stream '
    'goes on after it. Ends with `event: end` (`data: {"status"}`) once the run settled '
    "(succeeded, failed, cancelled, needs attention); a stream open for 5 minutes closes "
    "without it and the client reconnects. With `live=true`, also the model's text as it "
    'arrives: `event: delta` and `data: {"step_id", "text"}`, without an id — live only, '
    "never stored nor replayed (the model step records the whole answer; PostgreSQL only). "
    "503 when this web process serves its limit of streams already (retry after the "
    "`Retry-After` seconds).",
    openapi_extra={
        "responses": {
            200: {
                "description": "the stream",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            }
        }
    },
)
def stream(
    request: HttpRequest,
    run_id: str,
    q: Query[StreamQuery],
    last_event_id: str | None = Header(default=None, alias="Last-Event-ID", max_length=20),
) -> StreamingHttpResponse:
    require(request, "read")
    refuse_unknown_query(request, StreamQuery)
    after = 0
    if last_event_id:
        if not last_event_id.isascii() or not last_event_id.isdigit():
            raise problems.Problem(
                422, "invalid-input", "Invalid input", "Last-Event-ID: an event id (digits)"
            )
        after = int(last_event_id)
    run = run_or_404(request, run_id)
    try:
        return sse.response(run.run_id, after=after, live=q.live)
    except sse.TooManyStreams:
        raise problems.Problem(
            503,
            "busy",
            "Too many streams",
            f"this web process serves {sse.MAX_STREAMS} streams already; try again",
            headers={"Retry-After": "2"},
        ) from None


class StepsQuery(Strict):
    after: int = Field(default=0, ge=0, le=10**9, description="the seq of the last step seen")
    limit: int = Field(default=100, ge=1, le=500)


@router.get("/runs/{run_id}/steps", response={200: StepPageOut, **REFUSALS}, summary="Steps")
def steps(request: HttpRequest, run_id: str, q: Query[StepsQuery]) -> StepPageOut:
    """A run's steps in the order they first executed, ``limit`` at a time, each with its
    failed attempts (exception type, message, capped traceback, the retry that followed)."""
    require(request, "read")
    refuse_unknown_query(request, StepsQuery)
    run = run_or_404(request, run_id)
    rows = selectors.steps_after(run_id=run.run_id, after_seq=q.after, limit=q.limit + 1)
    more = len(rows) > q.limit
    rows = rows[: q.limit]
    return StepPageOut(
        steps=[StepOut.of(s) for s in rows],
        next_cursor=str(rows[-1].seq) if more and rows else None,
    )


@router.get(
    "/runs/{run_id}/executions",
    response={200: list[ExecutionOut], **REFUSALS},
    summary="Executions",
)
def executions(request: HttpRequest, run_id: str) -> list[ExecutionOut]:
    """Each execution of the run, claim to end, in order: the worker, when, how it ended
    (finished, stopped for a person, paused, failed, released, handed back, cancelled, lease
    lost, crashed), the steps replayed and executed, and the error."""
    require(request, "read")
    run = run_or_404(request, run_id)
    return [ExecutionOut.of(row) for row in selectors.run_executions(run.run_id)]


@router.post(
    "/runs/{run_id}/steps/{step}/accept-stale",
    response={200: StaleAcceptedOut, **REFUSALS},
    summary="Accept a stale step's stored result",
    description="Keep the step's stored result for today's inputs (found by a dry replay) and "
    "queue the run when it is stopped on that step. Refused (409) when the step is not stale "
    "today or moved since `seen_version`.",
)
def accept_stale(
    request: HttpRequest, run_id: str, step: int, body: AcceptStaleIn
) -> StaleAcceptedOut:
    token = require(request, "operate")
    run = run_or_404(request, run_id, "operate")
    row = step_or_404(run, step)
    try:
        done = stale.accept_stale(
            run_id=run.run_id,
            step_id=row.step_id,
            by=actor(token),
            reason=body.reason,
            seen_version=body.seen_version,
            resume=body.resume,
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return StaleAcceptedOut(run=RunOut.of(run_or_404(request, run_id)), step=StepOut.of(done))


def _act(request: HttpRequest, run_id: str, fn: object, **kwargs: object) -> RunOut:
    token = require(request, "operate")
    run = run_or_404(request, run_id, "operate")
    try:
        fn(run_id=run.run_id, by=actor(token), **kwargs)  # type: ignore[operator]
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return RunOut.of(run_or_404(request, run_id))


@router.post("/runs/{run_id}/resume", response={200: RunOut, **REFUSALS}, summary="Resume")
def resume(request: HttpRequest, run_id: str, body: ResumeIn) -> RunOut:
    """Queue a stopped run (needs attention or failed) for a worker, as the dashboard does."""
    return _act(
        request,
        run_id,
        resume_process.run_resume,
        reason=body.reason,
        seen_version=body.seen_version,
        max_resumes=body.max_resumes,
    )


@router.post("/runs/{run_id}/retry", response={200: RunOut, **REFUSALS}, summary="Retry")
def retry(request: HttpRequest, run_id: str, body: ResumeIn) -> RunOut:
    """Retry a failed run: what succeeded replays, the failed step executes again."""
    return _act(
        request,
        run_id,
        resume_process.run_retry,
        reason=body.reason,
        seen_version=body.seen_version,
        max_resumes=body.max_resumes,
    )


@router.post("/runs/{run_id}/cancel", response={200: RunOut, **REFUSALS}, summary="Cancel")
def cancel(request: HttpRequest, run_id: str, body: ReasonIn) -> RunOut:
    """Cancel a run for good; a worker executing it can commit nothing more."""
    return _act(
        request, run_id, transitions.run_cancel, reason=body.reason, seen_version=body.seen_version
    )


@router.post(
    "/runs/{run_id}/events",
    response={200: EventOut, 201: EventOut, **REFUSALS},
    summary="Send an event to a run",
    description="Puts the event in the run's mailbox, where the agent's "
    "`ctx.wait_for_event(name)` takes it, exactly once, in the order events arrived; a run "
    "released while it waits for that name is queued at once. 201 with the new event; 200 "
    "with the same event when `event_id` was sent before with the same name and payload; 409 "
    "when it was sent with another name or payload, or the run is finished; 404 for an unknown "
    "run; 413 for a payload over RUNLEDGER_MAX_EVENT_BYTES; 422 for a payload that is not JSON.",
)
def send_event(request: HttpRequest, run_id: str, body: EventIn) -> Status[EventOut]:
    token = require(request, "start")
    run_or_404(request, run_id, "start")
    try:
        sent = ledger_api.send_event(
            run_id, body.name, body.payload, event_id=body.event_id, by=actor(token)
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    answer = EventOut(**dataclasses.asdict(sent))
    return Status(201 if sent.created else 200, answer)


@router.post(
    "/runs/{run_id}/answer",
    response={200: RunOut, **REFUSALS},
    summary="Answer the question a run waits on",
    description="The run stopped at `ctx.ask` (status `needs_attention`, reason `question`). "
    "A person's token whose person holds the question's role (or a stronger one) answers; the "
    "answer is validated against the question's JSON Schema (422 when it does not fit), "
    "audited, recorded as the step's result, and the run queued. 403 for a service's token or "
    "a person without the role; 409 when the run waits on no question (answered already).",
)
def answer(request: HttpRequest, run_id: str, body: AnswerIn) -> RunOut:
    token = require(request, "read")  # every role reads; the question says who may answer
    person = token.user
    if person is None:
        raise problems.forbidden("an answer is a person's: use a person's token, not a service's")
    run = run_or_404(request, run_id)
    question = selectors.question_of(run=run)
    if question is not None and not role_in_team_at_least(person, run.team, question.role):
        raise problems.forbidden(
            f"this question is for a {question.role} (or stronger); "
            f"{person.get_username()} is {role_in_team(person, run.team) or 'in no role'} "
            f"in the team {run.team}"
        )
    try:
        transitions.question_answer(
            run_id=run_id, answer=body.answer, by=person, reason=body.reason
        )
    except transitions.OperationError as exc:
        raise problems.refusal(exc) from exc
    return RunOut.of(run_or_404(request, run_id))


def role_in_team(person: object, team: str) -> str:
    """The strongest role ``person`` holds in ``team``: their role group (every team) or their
    role in that team (``TeamRole``), whichever is stronger ('' for none)."""
    held = [r for r in (role_of(person), team_roles(person).get(team, "")) if r in RANKS]  # type: ignore[arg-type]
    return max(held, key=RANKS.index, default="")


def role_in_team_at_least(person: object, team: str, role: str) -> bool:
    held = role_in_team(person, team)
    return bool(held) and role in RANKS and RANKS.index(held) >= RANKS.index(role)
