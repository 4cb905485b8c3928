"""Handover: a person takes a run ("on it"), takes it over from someone else, releases it, and
leaves notes on it. Each change is one transaction with its audit row; a note *is* its audit
row (``run_note``, the text as the reason), append-only like every other.

Taking a run someone else holds is refused (``Conflict``, naming them) unless the form showed
that very person (``seen_holder``): a take-over is deliberate, never a race lost in silence.
Taking a run you hold already changes nothing and writes nothing. A note carries the key of
the form it was typed in: the same form sent twice (a double click) is one note.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from ledger.errors import Conflict, InvalidInput, NotAllowed
from ledger.inputs import queryable
from ledger.models import AuditAction, AuditEvent, Handover, Run
from ledger.transitions._common import MAX_REASON_CHARS, Actor, actor_name, record

Clock = Callable[[], datetime]
MAX_NOTE_CHARS = MAX_REASON_CHARS


def handover_snapshot(handover: Handover | None) -> dict[str, Any]:
    if handover is None:
        return {"taken_by": ""}
    return {"taken_by": handover.taken_by, "taken_at": handover.taken_at.isoformat()}


def _check_run(run_id: str) -> None:
    if not run_id or not queryable(run_id) or not Run.objects.filter(pk=run_id).exists():
        raise InvalidInput(f"there is no run {run_id[:80]!r}")


def run_take(
    *, run_id: str, by: Actor, seen_holder: str = "", clock: Clock = timezone.now
) -> tuple[Handover, bool]:
    """``by`` is on the run from now on; (the handover, whether anything changed).

    ``seen_holder`` is who the form showed on the run ("" for nobody): taking a run held by
    anyone else is a ``Conflict``.
    """
    name = actor_name(by)
    _check_run(run_id)
    now = clock()
    try:
        with transaction.atomic():
            current = Handover.objects.select_for_update().filter(pk=run_id).first()
            if current is not None and current.taken_by == name:
                return current, False
            if current is not None and current.taken_by != seen_holder:
                raise Conflict(
                    f"{current.taken_by} is on this run already (they took it after this page "
                    f"was shown): ask them, or take it over from {current.taken_by}",
                    current=handover_snapshot(current),
                )
            before = handover_snapshot(current)
            if current is None:
                handover = Handover(run_id=run_id, taken_by=name, taken_at=now)
                handover.save(force_insert=True)
            else:
                Handover.objects.filter(pk=run_id, taken_by=current.taken_by).update(
                    taken_by=name, taken_at=now
                )
                handover = Handover(run_id=run_id, taken_by=name, taken_at=now)
            why = f"took it over from {current.taken_by}" if current else "on it"
            record(
                by=name,
                action=AuditAction.RUN_TAKE,
                at=now,
                run_id=run_id,
                before=before,
                after=handover_snapshot(handover),
                reason=why,
            )
    except IntegrityError:
        # Someone took it between our read and our insert.
        holder = Handover.objects.filter(pk=run_id).first()
        raise Conflict(
            f"{holder.taken_by if holder else 'someone'} took this run a moment before you: "
            "ask them, or take it over",
            current=handover_snapshot(holder),
        ) from None
    return handover, True


def run_release(*, run_id: str, by: Actor, clock: Clock = timezone.now) -> bool:
    """Nobody is on the run any more. Only its holder releases it (others take it over);
    releasing a run nobody holds is refused. True when released."""
    name = actor_name(by)
    _check_run(run_id)
    now = clock()
    with transaction.atomic():
        current = Handover.objects.select_for_update().filter(pk=run_id).first()
        if current is None:
            raise NotAllowed("nobody is on this run: there is nothing to release")
        if current.taken_by != name:
            raise Conflict(
                f"{current.taken_by} is on this run, not you: only they can release it (or "
                "take it over from them)",
                current=handover_snapshot(current),
            )
        before = handover_snapshot(current)
        Handover.objects.filter(pk=run_id, taken_by=name).delete()
        record(
            by=name,
            action=AuditAction.RUN_RELEASE,
            at=now,
            run_id=run_id,
            before=before,
            after=handover_snapshot(None),
            reason="released",
        )
    return True


def check_note(text: str) -> str:
    note = (text or "").strip()
    if not note:
        raise InvalidInput("the note is empty: write what the next person should know")
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(f"the note is {len(note)} characters; the limit is {MAX_NOTE_CHARS}")
    if not queryable(note):
        raise InvalidInput("the note holds a NUL byte or broken Unicode: remove it")
    return note


def run_note(
    *, run_id: str, by: Actor, text: str, key: str = "", clock: Clock = timezone.now
) -> tuple[AuditEvent, bool]:
    """Leave a note on the run; (the note's audit row, whether it is new). A note with the same
    form ``key`` on this run already is that note: nothing is written again."""
    name = actor_name(by)
    note = check_note(text)
    key = (key or "")[:64]
    if key and not queryable(key):
        raise InvalidInput("the form's key is not text")
    _check_run(run_id)
    with transaction.atomic():
        if connection.vendor == "postgresql":  # two copies of one form sent at once: one note
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"note:{run_id}"])
        if key:
            seen = (
                AuditEvent.objects.filter(
                    run_id=run_id, action=AuditAction.RUN_NOTE, after__key=key
                )
                .order_by("-at", "-id")
                .first()
            )
            if seen is not None:
                return seen, False
        event = record(
            by=name,
            action=AuditAction.RUN_NOTE,
            at=clock(),
            run_id=run_id,
            after={"key": key} if key else None,
            reason=note,
        )
    return event, True
