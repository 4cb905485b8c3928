"""The story of a run on its page (issue 23, item 2), the parts the other selectors do not
read: each shown step's inputs (a capped head, read in the database), and what people did to
the run that explains its state — who cancelled it, forked it, resumed or retried it, paused
it, and why — from the audit records and the pause that holds it. Reads only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import TextField
from django.db.models.functions import Cast, Left, Length

from ledger.models import AuditAction, AuditEvent, Pause, Run, Step

#: Characters of a step's inputs shown on the run page; the step's own page has them all.
INPUTS_HEAD_CHARS = 2_000


@dataclass(frozen=True)
class InputsHead:
    text: str  # the canonical JSON text, at most INPUTS_HEAD_CHARS characters
    length: int  # the whole text's length

    @property
    def truncated(self) -> bool:
        return self.length > len(self.text)


def inputs_head_annotations(limit: int = INPUTS_HEAD_CHARS) -> dict[str, Any]:
    """The annotations that read the head of each step's stored inputs as JSON text
    (``inputs_head``) and the whole text's length (``inputs_length``): the database cuts it,
    so a step with large inputs costs ``limit`` characters, not its size."""
    text = Cast("inputs", output_field=TextField())
    return {"inputs_head": Left(text, limit), "inputs_length": Length(text)}


def inputs_heads(steps: list[Step]) -> dict[int, InputsHead]:
    """pk → the head of that step's inputs, from steps read with ``inputs_head_annotations``."""
    return {
        s.pk: InputsHead(getattr(s, "inputs_head", None) or "", getattr(s, "inputs_length", 0) or 0)
        for s in steps
    }


@dataclass(frozen=True)
class Act:
    """One thing a person (or a service token) did to the run, in a sentence's parts."""

    action: str
    label: str  # "cancelled", "forked", …
    actor: str
    at: datetime
    reason: str
    other_run_id: str = ""  # the fork / clean run / parent on the other end
    step_id: str = ""


LABELS = {
    AuditAction.RUN_CANCEL: "cancelled it",
    AuditAction.RUN_CLEAN: "replaced it by a clean run",
    AuditAction.RUN_FORK: "forked it",
    AuditAction.RUN_RESUME: "resumed it",
    AuditAction.RUN_RETRY: "retried it",
    AuditAction.PAUSE: "paused it",
    AuditAction.UNPAUSE: "lifted its pause",
    AuditAction.SETTLEMENT_APPLY: "settled a step",
    AuditAction.SETTLEMENT_APPROVE: "approved a settlement",
    AuditAction.STALE_ACCEPT: "accepted a stale step",
    AuditAction.REEXECUTE_FROM: "re-executed from a step",
    AuditAction.GATE_APPROVE: "approved a gate",
    AuditAction.GATE_REJECT: "rejected a gate",
    AuditAction.QUESTION_ANSWER: "answered its question",
}

#: The people's acts a run's header tells (the audit section below lists every event).
STORY_ACTIONS = tuple(LABELS)


def _other(event: AuditEvent) -> str:
    after = event.after if isinstance(event.after, dict) else {}
    other = after.get("other_run_id")
    return other if isinstance(other, str) else ""


def _act(event: AuditEvent, label: str) -> Act:
    return Act(
        action=event.action,
        label=label,
        actor=event.actor,
        at=event.at,
        reason=event.reason,
        other_run_id=_other(event),
        step_id=event.step_id,
    )


def run_acts(*, run_id: str, limit: int = 10) -> list[Act]:
    """The run's latest acts that changed its course, newest first (audit index run_id, at)."""
    events = AuditEvent.objects.filter(run_id=run_id, action__in=STORY_ACTIONS).order_by(
        "-at", "-id"
    )[:limit]
    out = []
    for e in events:
        label = LABELS.get(AuditAction(e.action), e.action)
        before = e.before if isinstance(e.before, dict) else {}
        other = _other(e)
        if (
            e.action == AuditAction.RUN_FORK
            and other
            and other != run_id
            and before.get("parent_run_id") != run_id
        ):
            label = "forked it from its parent"
        if e.action == AuditAction.RUN_CLEAN and "replaces" in before:
            label = "started it as a clean run"
        out.append(_act(e, label))
    return out


def cancelled_by(*, run: Run) -> Act | None:
    """Who cancelled a cancelled run and why: the latest cancel, clean-run replacement, or
    settlement that abandoned its step (None for a run that is not cancelled, or whose cancel
    left no audit row)."""
    if run.status != "cancelled":
        return None
    causes = (
        AuditAction.RUN_CANCEL,
        AuditAction.RUN_CLEAN,
        AuditAction.SETTLEMENT_APPLY,
        AuditAction.SETTLEMENT_APPROVE,
    )
    events = AuditEvent.objects.filter(run_id=run.run_id, action__in=causes).order_by("-at", "-id")
    for e in events[:20]:
        after = e.after if isinstance(e.after, dict) else {}
        if e.action in (AuditAction.SETTLEMENT_APPLY, AuditAction.SETTLEMENT_APPROVE):
            step = after.get("step")
            if not isinstance(step, dict) or step.get("status") != "abandoned":
                continue
            label = "abandoned its step and so cancelled it"
        else:
            label = LABELS[AuditAction(e.action)]  # "cancelled it" / "replaced it by a clean run"
        return _act(e, label)
    return None


def holding_pause(*, run: Run) -> Pause | None:
    """The pause holding a paused run (who made it, when, why)."""
    if run.status != "paused" or run.pause_id is None:
        return None
    return Pause.objects.filter(pk=run.pause_id).first()
