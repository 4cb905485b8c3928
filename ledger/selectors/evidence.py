"""Approving with the evidence (issue 23, item 4): what a proposed value — a settlement's
result, a gate's arguments — says about the fields it shares with the evidence beside it (the
step's inputs, the tool's lookup answer, the records the agent read), and where they disagree.

Only fields a person can check are compared: amounts (``amount``, ``*_cents``, ``total``…),
who (``customer``, ``account``, ``to``…), ``currency``, and ids (``id``, ``*_id``), matched by
the field's own name at any depth. Amounts are compared by magnitude (a refund of 4200 is
often written -4200 downstream); everything else exactly. A field that appears in a source
with several values disagrees only when the proposed value is none of them. Reads only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from ledger.models import AuditAction, AuditEvent, Gate, Step, StepKind, StepStatus

#: Field names (lower case) compared as they are, beside the amount and id families.
WHO_FIELDS = frozenset(
    {"customer", "account", "to", "email", "recipient", "payee", "currency", "iban"}
)
AMOUNT_WORDS = ("amount", "cents", "total", "price")
#: How many of the run's earlier reads a gate's arguments are compared with.
GATE_READS = 20
#: Values deeper than this are not walked (the evidence is a page, not a proof).
MAX_DEPTH = 6


@dataclass(frozen=True)
class Contradiction:
    """One checkable field whose proposed value disagrees with a source of evidence."""

    field: str  # the path in the proposed value, e.g. "amount_cents" or "charge.customer"
    proposed: Any
    expected: tuple[Any, ...]  # the value(s) the source holds under the same name
    source: str  # "the step's inputs", "the lookup's answer", "step fetch_invoice's result"

    def sentence(self) -> str:
        said = " or ".join(_shown(v) for v in self.expected)
        return f"{self.field} is {_shown(self.proposed)} here, but {said} in {self.source}"


def _shown(value: Any) -> str:
    return f"“{value}”" if isinstance(value, str) else str(value)


def is_amount(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in AMOUNT_WORDS)


def is_checkable(name: str) -> bool:
    low = name.lower()
    return low in WHO_FIELDS or low == "id" or low.endswith("_id") or is_amount(low)


def _leaves(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, str, Any]]:
    """(path, field name, scalar value) of every checkable scalar in ``value``."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key, inner in value.items():
            name = str(key)
            where = f"{path}.{name}" if path else name
            if isinstance(inner, dict | list):
                yield from _leaves(inner, where, depth + 1)
            elif inner is not None and is_checkable(name):
                yield where, name, inner
    elif isinstance(value, list):
        for i, inner in enumerate(value[:200]):
            yield from _leaves(inner, f"{path}[{i}]", depth + 1)


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            return None
    return None


def _agrees(name: str, proposed: Any, expected: Any) -> bool:
    if is_amount(name):
        a, b = _number(proposed), _number(expected)
        if a is not None and b is not None:
            return abs(a) == abs(b)
    if isinstance(proposed, str) and isinstance(expected, str):
        return proposed.strip() == expected.strip()
    return bool(proposed == expected)


def contradictions(proposed: Any, sources: list[tuple[str, Any]]) -> list[Contradiction]:
    """Where ``proposed`` disagrees with each (label, value) source, in the proposed value's
    order; [] when every checkable field it shares with a source agrees (or none is shared)."""
    out: list[Contradiction] = []
    for label, evidence in sources:
        held: dict[str, list[Any]] = {}
        for _path, name, value in _leaves(evidence):
            held.setdefault(name, []).append(value)
        for path, name, value in _leaves(proposed):
            if name not in held:
                continue
            if any(_agrees(name, value, e) for e in held[name]):
                continue
            unique = tuple(dict.fromkeys(held[name]))
            out.append(Contradiction(field=path, proposed=value, expected=unique, source=label))
    return out


def settlement_sources(*, step: Step, lookup_answer: dict[str, Any]) -> list[tuple[str, Any]]:
    """What a settlement's "it happened" result is compared with: the step's inputs and, when
    a person asked the tool's lookup and it answered with a result, that result."""
    sources: list[tuple[str, Any]] = [("the step's inputs", step.inputs)]
    if lookup_answer.get("result") is not None:
        sources.append(("the lookup's answer", lookup_answer["result"]))
    return sources


def gate_sources(*, gate: Gate) -> list[tuple[str, Any]]:
    """What a gate's arguments are compared with: the run's inputs and the results of the
    run's reads that succeeded (the records the agent worked from), the last ``GATE_READS``."""
    sources: list[tuple[str, Any]] = [("the run's inputs", gate.run.inputs)]
    reads = (
        Step.objects.filter(run_id=gate.run_id, kind=StepKind.READ, status=StepStatus.SUCCEEDED)
        .exclude(step_id=gate.step_id)
        .order_by("-seq")
        .values_list("step_id", "result")[:GATE_READS]
    )
    for step_id, result in reversed(list(reads)):
        sources.append((f"step {step_id}'s result", result))
    return sources


def last_lookup_answers(*, steps: list[Step]) -> dict[tuple[str, str], dict[str, Any]]:
    """:func:`last_lookup_answer` for many steps in one query, by (run_id, step_id); a step
    nobody asked is absent."""
    if not steps:
        return {}
    wanted = {(s.run_id, s.step_id) for s in steps}
    events = AuditEvent.objects.filter(
        run_id__in={r for r, _ in wanted},
        step_id__in={s for _, s in wanted},
        action=AuditAction.RECONCILE_LOOKUP,
    ).order_by("at", "id")  # the newest last: it wins
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events.only("run_id", "step_id", "after"):
        if (e.run_id, e.step_id) in wanted:
            out[(e.run_id, e.step_id)] = e.after if isinstance(e.after, dict) else {}
    return out


def last_lookup_answer(*, step: Step) -> dict[str, Any]:
    """The last answer a person got from the step's lookup (the audit's reconcile_lookup
    row's ``after``), {} when nobody asked."""
    event = (
        AuditEvent.objects.filter(
            run_id=step.run_id, step_id=step.step_id, action=AuditAction.RECONCILE_LOOKUP
        )
        .order_by("-at", "-id")
        .first()
    )
    after = event.after if event is not None else None
    return after if isinstance(after, dict) else {}
