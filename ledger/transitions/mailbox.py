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
from django.utils import timezone

from ledger import canonical, faultpoints, signals
from ledger.conf import conf
from ledger.errors import Conflict, InvalidInput, NotAllowed, NotJSON, PayloadTooLarge, UnknownRun
from ledger.models import FINAL_STATUSES, MailboxEvent, Run, RunStatus, StepStatus
from ledger.transitions.lifecycle import _RELEASED, _fenced
from ledger.transitions.steps import step_update

Clock = Callable[[], datetime]

#: ``Run.wake_at`` of a run that waits for an event without a timeout: never due by itself;
#: the event's arrival (``event_send``) sets it to the arrival time.
NEVER = datetime(9999, 1, 1, tzinfo=UTC)

NAME_CHARS = 200


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
