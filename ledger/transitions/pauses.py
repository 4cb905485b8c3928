"""Pauses: an operator holds a tool (in every agent), an agent or one run, and lifts the hold.

``pause_create`` writes the pause and its audit row; workers hold runs through
``run_hold_paused`` (``lifecycle``); ``pause_lift`` marks the pause lifted and queues every run
it holds, in one transaction with one audit row that counts them (``selectors.pause_held``
gives the count first). A pause may carry an expiry (``expires_at``): the sweep lifts it then
(``pauses_expire``), audited as ``system:pause-expiry``, as a person's lift is. A pause of an
unknown tool, agent or run, a second pause of the same target, a lift of a lifted pause, an
expiry in the past: refused, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ledger import registry
from ledger.errors import Conflict, InvalidInput, NotAllowed
from ledger.models import FINAL_STATUSES, AuditAction, Pause, PauseScope, Run, RunStatus
from ledger.transitions._common import Actor, actor_name, announce_queued, record, require_reason

Clock = Callable[[], datetime]

#: The run ids an unpause's audit row lists (the count is always complete).
AUDIT_RUN_IDS = 200


#: Who lifts a pause whose expiry passed (in the audit).
EXPIRY_ACTOR = "system:pause-expiry"
#: The longest expiry a pause may be given.
MAX_EXPIRY = timedelta(days=366)


def pause_create(
    *,
    scope: str,
    target: str,
    by: Actor,
    reason: str,
    expires_at: datetime | None = None,
    clock: Clock = timezone.now,
) -> Pause:
    """Pause ``target`` (a tool name, an agent name or a run id, as ``scope`` says), until a
    person lifts it or, with ``expires_at``, until then."""
    name = actor_name(by)
    text = require_reason(reason)
    target = (target or "").strip()
    _check_target(scope, target)
    now = clock()
    if expires_at is not None and timezone.is_naive(expires_at):
        raise InvalidInput("give a pause's expiry with its time zone (e.g. 2026-12-03T18:00Z)")
    if expires_at is not None and not now < expires_at <= now + MAX_EXPIRY:
        raise InvalidInput("a pause's expiry must be in the future, at most a year from now")
    try:
        with transaction.atomic():
            pause = Pause(
                scope=scope,
                target=target,
                reason=text,
                created_by=name,
                created_at=now,
                expires_at=expires_at,
            )
            pause.save(force_insert=True)
            record(
                by=name,
                action=AuditAction.PAUSE,
                at=now,
                run_id=target if scope == PauseScope.RUN else "",
                after=pause_snapshot(pause),
                reason=text,
            )
    except IntegrityError:
        raise Conflict(f"{scope} {target!r} is already paused; lift that pause first") from None
    return pause


def _check_target(scope: str, target: str) -> None:
    if scope not in PauseScope.values:
        raise InvalidInput(f"a pause is of a tool, an agent or a run, not {scope!r}")
    if not target:
        raise InvalidInput(f"name the {scope} to pause")
    if scope == PauseScope.TOOL and registry.get_tool(target) is None:
        known = ", ".join(sorted(registry.tools())) or "none"
        raise InvalidInput(f"no tool named {target!r} is registered (known: {known})")
    unknown_agent = scope == PauseScope.AGENT and registry.get_agent(target) is None
    if unknown_agent and not Run.objects.filter(agent=target).exists():
        raise InvalidInput(f"no agent named {target!r} is registered or has runs")
    if scope == PauseScope.RUN:
        status = Run.objects.filter(pk=target).values_list("status", flat=True).first()
        if status is None:
            raise InvalidInput(f"no run {target!r}")
        if status in FINAL_STATUSES:
            raise NotAllowed(f"run {target} is already {status}: there is nothing to pause")


def pause_lift(
    *,
    pause_id: int,
    by: Actor,
    reason: str,
    expected: int | None = None,
    clock: Clock = timezone.now,
) -> Pause:
    """Lift an active pause and queue every run it holds (each announced after the commit).

    ``expected``: the count of held runs the person was shown; when more or fewer are held now
    the lift is refused (``Conflict``) so that nobody queues a number they did not see.
    """
    name = actor_name(by)
    text = require_reason(reason)
    now = clock()
    with transaction.atomic():
        pause = _lock_active(pause_id)
        held = list(
            Run.objects.select_for_update()
            .filter(status=RunStatus.PAUSED, pause=pause)
            .order_by("run_id")
            .values_list("run_id", flat=True)
        )
        if expected is not None and expected != len(held):
            raise Conflict(
                f"the pause holds {len(held)} runs now, not the {expected} you were shown; "
                "look again",
                current=pause_snapshot(pause),
            )
        before = pause_snapshot(pause)
        Run.objects.filter(pk__in=held, status=RunStatus.PAUSED, pause=pause).update(
            status=RunStatus.QUEUED,
            pause=None,
            updated_at=now,
            status_changed_at=now,
            version=F("version") + 1,
        )
        Pause.objects.filter(pk=pause.pk).update(
            lifted_by=name, lifted_at=now, lift_reason=text, requeued=len(held)
        )
        pause.refresh_from_db()
        record(
            by=name,
            action=AuditAction.UNPAUSE,
            at=now,
            run_id=pause.target if pause.scope == PauseScope.RUN else "",
            before=before,
            after={**pause_snapshot(pause), "run_ids": held[:AUDIT_RUN_IDS]},
            reason=text,
        )
        for run_id in held:
            announce_queued(run_id, cause="unpause")
    return pause


def pauses_expire(*, clock: Clock = timezone.now, limit: int = 50) -> list[int]:
    """Lift every active pause whose expiry passed (as ``pause_lift`` does: the held runs
    queued, one audit row by ``system:pause-expiry``); the pauses lifted. One indexed query
    when none is due; a pause lifted by a person meanwhile is skipped."""
    now = clock()
    due = list(
        Pause.objects.filter(lifted_at__isnull=True, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)[:limit]
    )
    lifted = []
    for pk in due:
        try:
            pause_lift(pause_id=pk, by=EXPIRY_ACTOR, reason="its expiry passed", clock=clock)
        except NotAllowed:
            continue  # lifted by a person a moment ago
        lifted.append(pk)
    return lifted


def _lock_active(pause_id: int) -> Pause:
    pause = Pause.objects.select_for_update().filter(pk=pause_id).first()
    if pause is None:
        raise InvalidInput(f"no pause {pause_id}")
    if pause.lifted_at is not None:
        raise NotAllowed(
            f"pause {pause_id} was lifted by {pause.lifted_by} at {pause.lifted_at:%Y-%m-%d %H:%M}"
        )
    return pause


def pause_snapshot(pause: Pause) -> dict[str, Any]:
    return {
        "pause": pause.pk,
        "scope": pause.scope,
        "target": pause.target,
        "reason": pause.reason,
        "created_by": pause.created_by,
        "lifted_by": pause.lifted_by,
        "requeued": pause.requeued,
        "expires_at": pause.expires_at.isoformat() if pause.expires_at else None,
    }
