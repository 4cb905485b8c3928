"""What a resume does with one call, given its recorded row: the one decision the engine acts
on and the dry replay reports, so that a preview cannot drift from what a worker will do.

Two questions, asked in this order for every call:

1. The path (``expected_step``): does today's code call the step the recorded run went to
   next? If not, the run diverges and the agent's policy decides (refuse, or replan by
   abandoning the recorded branch's non-effect rows: ``abandon_branch``).
2. The row (``decide``): replay it, re-read it (an expired read), refuse it as stale (its
   stored input hash is not today's), reconcile it (a started effect: its outcome is unknown),
   recheck it (a failed effect: ask before sending again), or execute it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime

from ledger.states import StepKind, StepRow, StepStatus


class Action(enum.StrEnum):
    REPLAY = "replay"  # return the stored result; nothing runs
    REREAD = "reread"  # a read whose result expired: read again
    STALE = "stale"  # the stored row answers other inputs: the run stops
    RECONCILE = "reconcile"  # a started effect: ask the downstream system by its effect key
    RECHECK = "recheck"  # a failed effect: ask before sending again under the same key
    EXECUTE = "execute"  # no settled row: run it (again)


def decide(*, kind: str, input_hash: str, row: StepRow | None, now: datetime) -> Action:
    """What a resume does with a call of ``kind`` hashing to ``input_hash`` whose live (not
    abandoned) recorded row is ``row``."""
    if row is None:
        return Action.EXECUTE
    effect = kind == StepKind.EFFECT
    if row.status == StepStatus.SUCCEEDED:
        if row.input_hash != input_hash:
            return Action.STALE
        expired = row.kind == StepKind.READ and row.expires_at is not None
        return Action.REREAD if expired and row.expires_at <= now else Action.REPLAY  # type: ignore[operator]
    if effect and row.status == StepStatus.STARTED:
        return Action.STALE if row.input_hash != input_hash else Action.RECONCILE
    if effect and row.status == StepStatus.FAILED and row.effect_key:
        # Its last attempt may have reached the downstream system (a timeout after the charge).
        return Action.STALE if row.input_hash != input_hash else Action.RECHECK
    return Action.EXECUTE


def first_live_step(ledger: Mapping[str, StepRow]) -> str | None:
    live = [r for r in ledger.values() if r.status != StepStatus.ABANDONED]
    return min(live, key=lambda r: r.seq).step_id if live else None


def expected_step(ledger: Mapping[str, StepRow], prev: str | None) -> str | None:
    """The step the recorded run went to after ``prev`` (None: the first call); None when the
    ledger records no successor, so any call is a new step."""
    if prev is None:
        return first_live_step(ledger)
    prev_row = ledger.get(prev)
    return prev_row.next_step_id if prev_row is not None else None


def abandon_branch(ledger: Mapping[str, StepRow], start: str) -> list[str]:
    """The non-effect rows of the diverged branch from ``start``, marked abandoned in
    ``ledger``; effect rows keep their keys (and are never sent again)."""
    abandoned: list[str] = []
    seen: set[str] = set()
    current: str | None = start
    while current is not None and current not in seen:
        seen.add(current)
        row = ledger.get(current)
        if row is None:
            break
        if row.kind != StepKind.EFFECT and row.status != StepStatus.ABANDONED:
            abandoned.append(current)
            row.status = StepStatus.ABANDONED
        current = row.next_step_id
    return abandoned
