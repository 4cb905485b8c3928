"""A run's mailbox and its waits: an event sent to a run, an event taken by the step that waits
for it, and a run released while it sleeps or waits for an event.

- ``event_send``: one event in a run's mailbox, idempotent by its event id (the same id with the
  same name and payload is the same event; with others a ``Conflict``). A run released while it
  waits for an event of that name is queued at once, in the same transaction.
- ``mailbox_take``: the engine's: the oldest unconsumed event of a name becomes the result of
  the step that waits for it, in one transaction with that step's fenced write: an event is
  consumed exactly once, by exactly one step.
- ``run_wait``: the engine's: release a running run until its sleep is due (``wake_at``) or its
  event arrives, as a retry's back-off does (no worker, no connection, no resume budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ledger import canonical, faultpoints, signals
from ledger.conf import conf
from ledger.errors import Conflict, InvalidInput, NotAllowed, NotJSON, PayloadTooLarge, UnknownRun
from ledger.models import (
    FINAL_STATUSES,
    AuditAction,
    MailboxEvent,
    Reason,
    Run,
    RunStatus,
    Step,
    StepStatus,
)
from ledger.transitions._common import (
    Actor,
    actor_name,
    announce_queued,
    lock_run,
    record,
    write_run,
)
from ledger.transitions.lifecycle import _RELEASED, _fenced
from ledger.transitions.steps import step_update

Clock = Callable[[], datetime]

#: ``Run.wake_at`` of a run that waits for an event without a timeout: never due by itself;
#: the event's arrival (``event_send``) sets it to the arrival time.
NEVER = datetime(9999, 1, 1, tzinfo=UTC)

NAME_CHARS = 200
#: The mailbox name of a person's answer to ``ctx.ask`` (``answer:<step id>``), reserved.
ANSWER_PREFIX = "answer:"


@dataclass(frozen=True)
class Sent:
    """An event as the mailbox holds it; ``created`` is False for a repeat of its event id."""

    event: MailboxEvent
    created: bool


def event_send(
    *,
    run_id: str,
    name: str,
    payload: Any,
    event_id: str,
    sender: str = "",
    clock: Clock = timezone.now,
) -> Sent:
    """Put an event in the run's mailbox (or answer the one already sent under ``event_id``).

    Refused, nothing written: an unknown run (``UnknownRun``), a finished one (``NotAllowed``),
    a bad name or id or a payload that is not JSON (``InvalidInput``/``NotJSON``), a payload
    over RUNLEDGER_MAX_EVENT_BYTES (``PayloadTooLarge``), an event id used with another name or
    payload (``Conflict``)."""
    _check_text(name, "the event's name")
    if name.startswith(ANSWER_PREFIX):
        raise InvalidInput(f"event names starting {ANSWER_PREFIX!r} are a person's answers")
    _check_text(event_id, "the event id")
    data, _text, digest = _payload(payload)
    now = clock()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).only("status").first()
        if run is None:
            raise UnknownRun(f"no run {run_id!r}")
        same = MailboxEvent.objects.filter(run_id=run_id, event_id=event_id).first()
        if same is not None:
            if same.name != name or same.payload_hash != digest:
                raise Conflict(
                    f"event id {event_id!r} was sent to run {run_id} with another "
                    f"{'name' if same.name != name else 'payload'}; an event id names one event",
                    current={"event_id": event_id, "name": same.name, "payload": same.payload},
                )
            return Sent(same, created=False)
        if run.status in FINAL_STATUSES:
            raise NotAllowed(f"run {run_id} is {run.status}: it takes no more events")
        event = MailboxEvent.objects.create(
            run_id=run_id,
            event_id=event_id,
            name=name,
            payload=data,
            payload_hash=digest,
            sender=sender[:200],
            created_at=now,
        )
        woken = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, wait_event=name).update(
            wake_at=now, wait_event="", updated_at=now
        )
        if woken:
            signals.send_run_queued_on_commit(run_id=run_id, cause="event")
    return Sent(event, created=True)


def _check_text(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value or len(value) > NAME_CHARS:
        raise InvalidInput(f"{what} is text of 1 to {NAME_CHARS} characters")
    if not value.isprintable():
        raise InvalidInput(f"{what} holds characters that are not printable")


def _payload(payload: Any) -> tuple[Any, str, str]:
    try:
        data, text, digest = canonical.canonical_hashed(payload, step_id="<event payload>")
    except NotJSON as exc:
        raise InvalidInput(f"the event's payload is not JSON: {exc}") from exc
    limit = conf.RUNLEDGER_MAX_EVENT_BYTES
    size = len(text.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"the event's payload is {size} bytes; RUNLEDGER_MAX_EVENT_BYTES is {limit}",
            limit=limit,
        )
    return data, text, digest


def mailbox_take(
    *, run_id: str, token: str, pk: int, step_id: str, name: str, now: datetime
) -> dict[str, Any] | None:
    """The engine's: the oldest unconsumed event ``name`` of the run becomes the succeeded
    result of the waiting step (row ``pk``), in one transaction with its fenced write; None
    (nothing written) when the mailbox holds no such event. ``LeaseLost`` takes nothing."""
    with transaction.atomic():
        event = (
            MailboxEvent.objects.select_for_update()
            .filter(run_id=run_id, name=name, consumed_step_id="")
            .order_by("pk")
            .first()
        )
        if event is None:
            return None
        result = {"event_id": event.event_id, "payload": event.payload}
        step_update(
            run_id=run_id,
            token=token,
            pk=pk,
            status=StepStatus.SUCCEEDED,
            now=now,
            result_json=canonical.dumps(result),
        )
        MailboxEvent.objects.filter(pk=event.pk, consumed_step_id="").update(
            consumed_step_id=step_id[:255], consumed_at=now
        )
        faultpoints.point("mailbox.before_commit")  # taken and recorded, not yet committed
    return result


def run_wait(
    *,
    run_id: str,
    token: str,
    wake_at: datetime | None,
    event: str,
    detail: str,
    clock: Clock = timezone.now,
) -> None:
    """Release a running run that sleeps until ``wake_at`` or waits for an event ``event``
    (until ``wake_at``; None: no timeout). Queued, not claimable before then, announced with
    that time; a run waiting for an event that arrived meanwhile is queued for now. Costs no
    resume budget (``run_woke``). The event check follows the run's update, and ``event_send``
    inserts before it updates the run: whichever commits second sees the other."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.QUEUED,
            wake_at=wake_at or NEVER,
            wait_event=event,
            detail=detail,
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
        )
        if (
            event
            and MailboxEvent.objects.filter(run_id=run_id, name=event, consumed_step_id="").exists()
        ):
            Run.objects.filter(pk=run_id).update(wake_at=now, wait_event="")
            signals.send_run_queued_on_commit(run_id=run_id, cause="event")
        elif wake_at is not None:
            signals.send_run_queued_on_commit(run_id=run_id, cause="sleep", eta=wake_at)


def question_answer(
    *, run_id: str, answer: Any, by: Actor, reason: str = "", clock: Clock = timezone.now
) -> MailboxEvent:
    """A person's answer to the question a run waits on (``ctx.ask``): validated against the
    question's JSON Schema, put in the run's mailbox as the event ``answer:<step id>``,
    audited, and the run queued (a planned wait: no resume budget), in one transaction.

    Refused, nothing written: ``UnknownRun``; ``NotAllowed`` (the run waits on no question:
    answered already, or never asked); ``InvalidInput`` (not JSON, too large, or not valid
    against the schema). Whether ``by`` holds the question's role is the caller's check
    (``selectors.question_of`` says which role)."""
    name = actor_name(by)
    data, _text, digest = _payload(answer)
    now = clock()
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id).exists():
            raise UnknownRun(f"no run {run_id!r}")
        run = lock_run(run_id)
        if run.status != RunStatus.NEEDS_ATTENTION or run.reason != Reason.QUESTION:
            raise NotAllowed(
                f"run {run_id} waits on no question (it is {run.status}"
                + (f", {run.reason}" if run.reason else "")
                + "): answered already, or never asked; nothing was changed"
            )
        step = Step.objects.get(run_id=run_id, step_id=run.blocked_step_id)
        _check_answer(data, (step.inputs or {}).get("schema"))
        event = MailboxEvent.objects.create(
            run_id=run_id,
            event_id=ANSWER_PREFIX + step.step_id,
            name=ANSWER_PREFIX + step.step_id,
            payload=data,
            payload_hash=digest,
            sender=name,
            created_at=now,
        )
        record(
            by=name,
            action=AuditAction.QUESTION_ANSWER,
            at=now,
            run_id=run_id,
            step_id=step.step_id,
            before={"question": (step.inputs or {}).get("question")},
            after={"answer": data},
            reason=reason,
        )
        write_run(
            run,
            status=RunStatus.QUEUED,
            reason="",
            detail="",
            blocked_step_id="",
            wake_at=now,  # claimed as a wake-up (transitions.run_woke): no resume budget
            updated_at=now,
            status_changed_at=now,
        )
        announce_queued(run_id, cause="answer")
    return event


def _check_answer(data: Any, schema: Any) -> None:
    if schema is None:
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(data)
    )
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the answer"
        raise InvalidInput(
            f"the answer does not fit the question's schema: {where}: {error.message}"
        )


def question_timeout(*, run_id: str, clock: Clock = timezone.now) -> bool:
    """The sweep's: queue a run whose question's timeout passed unanswered (its ``ctx.ask``
    then returns its default). False when it is not such a run any more."""
    now = clock()
    with transaction.atomic():
        queued = Run.objects.filter(
            pk=run_id,
            status=RunStatus.NEEDS_ATTENTION,
            reason=Reason.QUESTION,
            wake_at__lte=now,
        ).update(
            status=RunStatus.QUEUED,
            reason="",
            detail="",
            blocked_step_id="",
            updated_at=now,
            status_changed_at=now,
            version=F("version") + 1,
        )
        if queued:
            announce_queued(run_id, cause="answer")
    return bool(queued)
