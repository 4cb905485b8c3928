"""The application's API, in process: start a run, follow it, read its outcome.

::

    from ledger.api import start_run

    handle = start_run("refund", {"invoice_id": "inv_1"}, idempotency_key="dispute-981")
    state = handle.wait(timeout=30)   # answers once the run finished or stopped for a person
    refund = handle.result()          # the agent's return value (waits; raises if it failed)

``start_run`` writes the run and announces it to the workers after the same commit (inside a
caller's transaction: after that one commits, never if it rolls back). It is idempotent: the same
``run_id`` or ``idempotency_key`` with the same agent and canonical inputs answers the run the
first call made (``handle.created`` is False); with other values it raises ``Conflict`` saying
what differs, and writes nothing. The plan version and tool schema of the run are those of the
worker that first executes it, not of the calling process.

``manage.py start_run``, the HTTP API (``runs.api``) and the Python client's server side all
start runs through this function. ``webhooks=[{"url": …, "events": ["run.succeeded"]}]``
subscribes the run's completion events in the start's own transaction (``ledger.events`` has
the per-agent subscriptions); the handle's ``subscriptions`` hold each with its signing secret,
shown this once. A repeated start subscribes nothing again.

``start_runs([...])`` starts up to 1,000 runs (each item what ``start_run`` takes) in one
transaction, announced to the workers once after its commit; each item keeps its own
idempotency key and the same conflict rules. One bad item refuses the whole batch
(``BatchRefused`` lists each, nothing is written)::

    handles = start_runs([
        {"agent": "refund", "inputs": {"invoice_id": i}, "idempotency_key": f"dispute-{i}"}
        for i in invoice_ids
    ])
    new = [h.run_id for h in handles if h.created]
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger import registry, transitions, waiting
from ledger.errors import (
    BatchRefused,
    Conflict,
    InvalidInput,
    ItemError,
    NotAllowed,
    PayloadTooLarge,
    UnknownRun,
)
from ledger.models import FINAL_STATUSES, Run, RunStatus, WebhookSubscription
from ledger.transitions import Actor

__all__ = [
    "MAX_BATCH",
    "BatchRefused",
    "Conflict",
    "InvalidInput",
    "ItemError",
    "NotAllowed",
    "PayloadTooLarge",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunNeedsAttention",
    "RunState",
    "SentEvent",
    "UnknownAgent",
    "UnknownRun",
    "get_run",
    "send_event",
    "start_run",
    "start_runs",
]

#: The most runs one ``start_runs`` call starts.
MAX_BATCH = transitions.MAX_BATCH


class UnknownAgent(LookupError):
    """No agent of that name is registered in this process."""


class RunNotSucceeded(Exception):
    """``result()`` of a run that did not succeed; ``state`` is the run as read."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        super().__init__(f"run {state.run_id} is {state.status}: {state.error or state.detail}")


class RunFailed(RunNotSucceeded):
    pass


class RunCancelled(RunNotSucceeded):
    pass


class RunNeedsAttention(RunNotSucceeded):
    """The run stopped until a person acts (``state.reason`` says why)."""


@dataclass(frozen=True)
class RunState:
    """A run as an application sees it (a snapshot; ``RunHandle.state()`` reads a new one)."""

    run_id: str
    agent: str
    status: str
    reason: str
    detail: str
    title: str
    labels: dict[str, str]
    inputs: Any
    result: Any
    error: str
    idempotency_key: str | None
    concurrency_key: str
    concurrency_limit: int
    priority: int
    #: Not executed before this time: its ``start_at``, or a retry's back-off (None: now).
    not_before: datetime | None
    deadline_at: datetime | None
    #: The schedule whose tick started the run (its id, ``sch_…``; "" for none).
    schedule: str
    plan_version: str
    resume_count: int
    max_resumes: int
    version: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def settled(self) -> bool:
        """Finished, or stopped until a person acts: what ``wait`` waits for."""
        return self.status in waiting.SETTLED

    @classmethod
    def of(cls, run: Run) -> RunState:
        return cls(
            run_id=run.run_id,
            agent=run.agent,
            status=run.status,
            reason=run.reason,
            detail=run.detail,
            title=run.title,
            labels=dict(run.labels or {}),
            inputs=run.inputs,
            result=run.result,
            error=run.error,
            idempotency_key=run.idempotency_key,
            concurrency_key=run.concurrency_key,
            concurrency_limit=run.concurrency_limit,
            priority=run.priority,
            not_before=run.wake_at,
            deadline_at=run.deadline_at,
            schedule=run.schedule,
            plan_version=run.plan_version,
            resume_count=run.resume_count,
            max_resumes=run.max_resumes,
            version=run.version,
            created_at=run.created_at,
            updated_at=run.updated_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
        )


class RunHandle:
    """A run by id. ``created`` says whether the start that made this handle wrote the run."""

    def __init__(
        self,
        run_id: str,
        *,
        created: bool = False,
        subscriptions: list[tuple[WebhookSubscription, str]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.created = created
        #: The per-run subscriptions the start made, each with its secret (``whsec_…``).
        self.subscriptions = subscriptions or []

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"

    def state(self) -> RunState:
        """The run now; ``Run.DoesNotExist`` if there is no such run."""
        return RunState.of(Run.objects.get(pk=self.run_id))

    def status(self) -> str:
        return self.state().status

    def wait(self, timeout: float = 60.0) -> RunState:
        """The run once it finished or stopped for a person, or as it is after ``timeout``
        seconds (check ``state.settled``)."""
        return waiting.wait_until_settled(
            self.run_id, timeout=timeout, read=self.state, settled=lambda s: s.settled
        )

    def result(self, timeout: float | None = None) -> Any:
        """The agent's return value, waiting up to ``timeout`` seconds (None: until it settles).
        Raises ``RunFailed``, ``RunCancelled``, ``RunNeedsAttention``, or ``TimeoutError`` when
        it is still going at the timeout."""
        while True:
            state = self.wait(timeout=60.0 if timeout is None else timeout)
            if state.settled or timeout is not None:
                break
        if state.status == RunStatus.SUCCEEDED:
            return state.result
        if state.status == RunStatus.FAILED:
            raise RunFailed(state)
        if state.status == RunStatus.CANCELLED:
            raise RunCancelled(state)
        if state.status == RunStatus.NEEDS_ATTENTION:
            raise RunNeedsAttention(state)
        raise TimeoutError(f"run {self.run_id} is still {state.status} after {timeout} s")


def start_run(
    agent: str,
    inputs: Any,
    *,
    run_id: str | None = None,
    idempotency_key: str | None = None,
    title: str | None = None,
    labels: dict[str, str] | None = None,
    max_resumes: int | None = None,
    by: Actor | None = None,
    reason: str = "",
    webhooks: list[dict[str, Any]] | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    priority: int | None = None,
    start_at: datetime | None = None,
    deadline: float | datetime | None = None,
    team: str | None = None,
) -> RunHandle:
    """Start a run of ``agent`` (see the module docstring); the run's handle.

    Refused, writing nothing: ``UnknownAgent``; ``InvalidInput`` (inputs not JSON or missing what
    the agent ``requires``, a run id outside ``ledger.inputs.RUN_ID_PATTERN``, a bad key, title
    or labels); ``Conflict`` (the id or key names a run started with other values).
    ``by`` is who is audited as having started it (``api:<token>``, ``cli:<login>``, a user);
    None audits nothing, as for runs the system starts. ``webhooks``: per-run subscriptions
    to the run's completion events, ``[{"url": …, "events": [...]}]`` (events default to all
    four), written with the run (a bad one is ``InvalidInput`` and nothing is written).

    ``concurrency_key``: at most ``concurrency_limit`` (default: the agent's declared limit, else
    1) runs with this key execute at once across every worker; the others wait queued, holding
    no worker (``ledger.pacing``). Without it the agent's declared key (``@agent(concurrency=…)``)
    applies. ``priority`` (0, the default, to 9): a queued run of higher priority is taken
    before older ones of lower priority, aged so that none starves
    (``RUNLEDGER_PRIORITY_AGING_SECONDS``). ``start_at`` (an aware datetime, at most
    ``RUNLEDGER_MAX_START_DELAY_DAYS`` ahead): the run is queued now and not executed before
    then, holding no worker. ``deadline`` (seconds from the start, or an aware datetime; the
    agent's declared ``deadline`` otherwise): past it the run stops before its next step, failed
    with reason ``deadline``. ``team``: the team the run belongs to (``ledger.teams``; default:
    the agent's declared team, else RUNLEDGER_DEFAULT_TEAM). None of these is compared on a
    repeat: the first start's hold.
    """
    if registry.get_agent(agent) is None:
        known = ", ".join(sorted(registry.agents())) or "none"
        raise UnknownAgent(f"no agent named {agent!r} is registered (registered: {known})")
    started = transitions.run_start_once(
        agent=agent,
        inputs=inputs,
        run_id=run_id,
        idempotency_key=idempotency_key,
        title=title,
        labels=labels,
        max_resumes=max_resumes,
        by=by,
        reason=reason,
        webhooks=webhooks,
        pace=transitions.Pace(
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            priority=priority,
            start_at=start_at,
            deadline=deadline,
        ),
        team=team,
    )
    return RunHandle(
        started.run.run_id, created=started.created, subscriptions=started.subscriptions
    )


@dataclass(frozen=True)
class SentEvent:
    """An event in a run's mailbox. ``created`` is False when ``event_id`` was sent before (the
    same event: nothing was written); ``consumed_step_id`` names the step that took it ("" while
    it waits in the mailbox)."""

    run_id: str
    event_id: str
    name: str
    payload: Any
    created: bool
    created_at: datetime
    consumed_step_id: str
    consumed_at: datetime | None


def send_event(
    run_id: str,
    name: str,
    payload: Any = None,
    *,
    event_id: str | None = None,
    by: Actor | None = None,
) -> SentEvent:
    """Send the event ``name`` with ``payload`` (JSON) to a run's mailbox: the run's
    ``ctx.wait_for_event(name)`` takes it, exactly once, in the order events arrived; a run
    released while it waits for that name is queued at once.

    Idempotent by ``event_id`` (default: a new random id, so a repeat is another event): the same
    id with the same name and payload answers the event sent first (``created`` False). Refused,
    writing nothing: ``UnknownRun``; ``NotAllowed`` (the run is finished); ``InvalidInput``
    (a bad name or id, a payload that is not JSON); ``PayloadTooLarge`` (over
    RUNLEDGER_MAX_EVENT_BYTES); ``Conflict`` (the id was used with another name or payload).
    ``by`` is recorded as the event's sender (``api:<token>``, ``cli:<login>``, a user)."""
    sender = "" if by is None else transitions.actor_name(by)
    sent = transitions.event_send(
        run_id=run_id,
        name=name,
        payload=payload,
        event_id=event_id if event_id is not None else "evt_" + secrets.token_hex(12),
        sender=sender,
    )
    event = sent.event
    return SentEvent(
        run_id=run_id,
        event_id=event.event_id,
        name=event.name,
        payload=event.payload,
        created=sent.created,
        created_at=event.created_at,
        consumed_step_id=event.consumed_step_id,
        consumed_at=event.consumed_at,
    )


def start_runs(
    runs: Sequence[Mapping[str, Any]], *, by: Actor | None = None, reason: str = ""
) -> list[RunHandle]:
    """Start many runs at once; one handle per item, in order (``handle.created`` False where
    an identical earlier start made the run: a repeat with the same key or id and the same
    agent and inputs, in an earlier call or earlier in this batch).

    Each item is a mapping of ``start_run``'s arguments but ``by``: ``agent``, ``inputs``
    (default ``{}``), ``run_id``, ``idempotency_key``, ``title``, ``labels``, ``max_resumes``,
    ``webhooks``, ``concurrency_key``, ``concurrency_limit``, ``priority``, ``start_at``,
    ``deadline`` and ``reason`` (default: ``reason``). At most ``MAX_BATCH`` (1,000) items.

    Refused, writing nothing: ``InvalidInput`` (a ``ValueError``) for a batch that is empty,
    too long or not a list; ``BatchRefused`` (an ``InvalidInput``) when any item is bad — an
    unknown agent, invalid input, or a ``Conflict`` with an earlier start — with
    ``.errors``, one ``ItemError`` (``index``, ``kind``, ``message``, ``current``) per bad
    item. New runs, their audit rows and their subscriptions commit together (inside a
    caller's transaction: with it) and reach the workers in one publish after the commit."""
    started = transitions.run_start_many(runs, by=by, reason=reason)
    return [
        RunHandle(s.run.run_id, created=s.created, subscriptions=s.subscriptions) for s in started
    ]


def get_run(run_id: str) -> RunHandle:
    """The handle of an existing run; ``Run.DoesNotExist`` if there is none."""
    if not Run.objects.filter(pk=run_id).exists():
        raise Run.DoesNotExist(f"no run {run_id!r}")
    return RunHandle(run_id)
