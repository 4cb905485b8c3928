"""The effect audit: what the ledger says each effect did, against the downstream system.

For every effect row with a key (succeeded, failed or abandoned) whose tool has a
``reconcile``, the tool's read path is asked about the key, and a difference is kept:

- ``missing_downstream``: the ledger says succeeded; the downstream system has nothing;
- ``unexpected_downstream``: the ledger says failed or abandoned; the downstream system has it;
- ``result_differs``: both say it happened, with different results;
- ``unknown_to_ledger``: a tool's optional ``list_keys(prefix)`` names a key no ledger row has.

Bounded (``limit`` rows a pass), rate-limited (``rate`` downstream questions a second), and
resumable: the pass is an ``EffectAudit`` row whose ``cursor`` is the last row asked about,
saved with the findings after every batch, so ``resume=<id>`` goes on where a pass stopped.
Read-only toward the ledger and the downstream systems: it writes its own report only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger import canonical, registry
from ledger.engine import aio
from ledger.errors import NotJSON
from ledger.models import Difference, EffectAudit, EffectAuditFinding, Step, StepStatus
from ledger.registry import NOT_HAPPENED, Tool
from ledger.selectors.effects import effect_rows, known_effect_keys

BATCH = 50
#: The prefix the list hooks are asked for: every key runledger makes starts with a run id.
KEY_PREFIX = "run_"


@dataclass
class _Pass:
    audit: EffectAudit
    findings: list[EffectAuditFinding] = field(default_factory=list)


class _Pacer:
    """At most ``rate`` calls a second (``0``: no limit), by the monotonic clock."""

    def __init__(
        self, rate: float, sleep: Callable[[float], None], monotonic: Callable[[], float]
    ) -> None:
        self.gap = 1.0 / rate if rate > 0 else 0.0
        self.sleep = sleep
        self.monotonic = monotonic
        self.next = 0.0

    def wait(self) -> None:
        now = self.monotonic()
        if self.next > now:
            self.sleep(self.next - now)
        self.next = max(now, self.next) + self.gap


def audit_effects(
    *,
    agent: str | None = None,
    since: datetime | None = None,
    limit: int = 1000,
    rate: float = 10.0,
    resume: int | None = None,
    by: str = "",
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    clock: Callable[[], datetime] = timezone.now,
) -> EffectAudit:
    """Run (or resume) one pass; return its report row (``finished`` once every row and list
    hook was asked)."""
    audit = _begin(agent=agent, since=since, resume=resume, by=by, clock=clock)
    work = _Pass(audit)
    pacer = _Pacer(rate, sleep, monotonic)
    agent_name = audit.agent or None
    rows = list(effect_rows(agent=agent_name, since=audit.since, after=audit.cursor, limit=limit))
    for i, row in enumerate(rows):
        _check(work, row, pacer)
        if (i + 1) % BATCH == 0:
            _save(work, clock)
    if len(rows) < limit:
        _list_unknown(work, pacer)
        audit.finished = True
    _save(work, clock)
    return audit


def _begin(
    *, agent: str | None, since: datetime | None, resume: int | None, by: str, clock: Any
) -> EffectAudit:
    if resume is not None:
        return EffectAudit.objects.get(pk=resume)
    now = clock()
    return EffectAudit.objects.create(
        created_at=now, updated_at=now, by=by, agent=agent or "", since=since
    )


def _check(work: _Pass, row: Step, pacer: _Pacer) -> None:
    audit = work.audit
    audit.cursor = row.pk
    tool = registry.get_tool(row.tool)
    if tool is None or tool.reconcile is None:
        audit.skipped += 1
        return
    pacer.wait()
    assert row.effect_key is not None
    try:
        answer = aio.call_sync(tool.reconcile, row.effect_key)  # an async lookup: on the loop
    except Exception:
        answer = None
    audit.checked += 1
    if answer is None:
        audit.unanswered += 1
        return
    difference, downstream = _compare(row, answer)
    if difference:
        work.findings.append(_finding(audit, row, difference, downstream))


def _compare(row: Step, answer: Any) -> tuple[str, Any]:
    """The difference between a row and the downstream system's answer ("" when none)."""
    if answer is NOT_HAPPENED:
        missing = row.status == StepStatus.SUCCEEDED
        return (Difference.MISSING_DOWNSTREAM if missing else ""), None
    try:
        data = canonical.normalize(answer)
    except NotJSON:
        data = repr(answer)[:2000]
    if row.status != StepStatus.SUCCEEDED:
        return Difference.UNEXPECTED_DOWNSTREAM, data
    if canonical.dumps(canonical.normalize(row.result)) != canonical.dumps(data):
        return Difference.RESULT_DIFFERS, data
    return "", data


def _finding(audit: EffectAudit, row: Step, difference: str, downstream: Any) -> EffectAuditFinding:
    return EffectAuditFinding(
        audit=audit,
        difference=difference,
        run_id=row.run_id,
        step_id=row.step_id,
        tool=row.tool,
        effect_key=row.effect_key or "",
        ledger_status=row.status,
        ledger_result=row.result,
        downstream=downstream,
    )


def _list_unknown(work: _Pass, pacer: _Pacer) -> None:
    """Ask each effect tool's ``list_keys`` hook for the keys it holds; keep the unknown."""
    for tool in _listing_tools(work.audit.agent):
        assert tool.list_keys is not None
        pacer.wait()
        try:
            keys = [str(k) for k in tool.list_keys(KEY_PREFIX)]
        except Exception:
            work.audit.unanswered += 1
            continue
        work.audit.listed += len(keys)
        for key in sorted(set(keys) - known_effect_keys(keys)):
            run_id = key.split(":", 1)[0]
            work.findings.append(
                EffectAuditFinding(
                    audit=work.audit,
                    difference=Difference.UNKNOWN_TO_LEDGER,
                    run_id=run_id,
                    tool=tool.name,
                    effect_key=key[:200],
                )
            )


def _listing_tools(agent: str) -> list[Tool]:
    if agent:
        definition = registry.get_agent(agent)
        tools = list(definition.tools) if definition else []
    else:
        tools = list(registry.tools().values())
    return [t for t in tools if t.list_keys is not None]


def _save(work: _Pass, clock: Callable[[], datetime]) -> None:
    """The findings so far and the cursor, in one transaction: a pass that dies resumes after
    the last saved batch (its rows are asked again; their findings were not yet kept)."""
    audit = work.audit
    audit.updated_at = clock()
    with transaction.atomic():
        EffectAuditFinding.objects.bulk_create(work.findings)
        audit.save()
    work.findings = []
