"""What the alert rules watch (one cheap query per rule, on indexed columns), the incidents an
operator reads, and the incidents page's groups of stopped runs by cause.

Each condition returns scope → ``Finding`` (the words and the facts an incident keeps); an
empty mapping is "all clear". Imports models only.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet

from ledger.alert_rules import Finding, Rule
from ledger.models import Alert, AlertStatus, Beacon, Gate, GateStatus, Run, RunStatus, Step
from ledger.selectors.runs import scoped

#: The statuses a run stopped in (the blocked-rate's denominator, in its window).
STOPPED_IN_WINDOW = (
    RunStatus.NEEDS_ATTENTION,
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
)


def _ago(now: datetime, t: datetime | None) -> str:
    if t is None:
        return "never"
    minutes = max(0, int((now - t).total_seconds() // 60))
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _scoped(per: str, scope: str) -> str:
    return f" of {per} {scope}" if per and scope else ""


def condition(rule: Rule, *, now: datetime, listed: int) -> dict[str, Finding]:
    """What ``rule``'s condition finds now, per scope."""
    if rule.kind == "blocked_longer":
        return _blocked_longer(rule, now, listed)
    if rule.kind == "blocked_rate":
        return _blocked_rate(rule, now, listed)
    if rule.kind == "gate_waiting":
        return _gate_waiting(rule, now, listed)
    return _recovery_lagging(rule, now, listed)


def _of_teams(rule: Rule, qs: QuerySet[Any], field: str = "team") -> QuerySet[Any]:
    """``qs`` narrowed to the rule's teams (every team when it names none)."""
    return qs.filter(**{f"{field}__in": list(rule.teams)}) if rule.teams else qs


def _blocked(rule: Rule, cutoff: datetime) -> QuerySet[Run]:
    # run_status_age: (status, status_changed_at)
    blocked = Run.objects.filter(status=RunStatus.NEEDS_ATTENTION, status_changed_at__lte=cutoff)
    return _of_teams(rule, blocked)


def _run_ids(qs: QuerySet[Run], listed: int) -> list[str]:
    return list(
        qs.order_by("status_changed_at", "run_id").values_list("run_id", flat=True)[:listed]
    )


def _blocked_longer(rule: Rule, now: datetime, listed: int) -> dict[str, Finding]:
    cutoff = now - timedelta(minutes=rule.minutes)
    key = rule.per if rule.per in ("agent", "team") else None
    rows = (
        _blocked(rule, cutoff)
        .values(*([key] if key else []))
        .annotate(n=Count("run_id"), oldest=Min("status_changed_at"))
    )
    found = {}
    for row in rows.order_by():
        scope = str(row[key]) if key else ""
        qs = _blocked(rule, cutoff).filter(**({key: scope} if key else {}))
        n = int(row["n"])
        summary = (
            f"{n} run{'s' if n != 1 else ''}{_scoped(rule.per, scope)} need attention longer "
            f"than {rule.minutes:g} min (the oldest for {_ago(now, row['oldest'])})"
        )
        found[scope] = Finding(summary, {"count": n, "run_ids": _run_ids(qs, listed)})
    return found


def _blocked_rate(rule: Rule, now: datetime, listed: int) -> dict[str, Finding]:
    since = now - timedelta(minutes=rule.minutes)
    window = _of_teams(
        rule, Run.objects.filter(status__in=STOPPED_IN_WINDOW, status_changed_at__gte=since)
    )
    key = rule.per if rule.per in ("agent", "team") else None
    rows = window.values(*([key] if key else [])).annotate(
        total=Count("run_id"), blocked=Count("run_id", filter=Q(status=RunStatus.NEEDS_ATTENTION))
    )
    found = {}
    for row in rows.order_by():
        total, blocked = int(row["total"]), int(row["blocked"])
        if total < rule.min_runs or blocked * 100 <= rule.percent * total:
            continue
        scope = str(row[key]) if key else ""
        rate = 100 * blocked / total
        qs = window.filter(status=RunStatus.NEEDS_ATTENTION, **({key: scope} if key else {}))
        summary = (
            f"{rate:.0f} % of the runs{_scoped(rule.per, scope)} that stopped in the last "
            f"{rule.minutes:g} min need attention ({blocked} of {total}; the rule: over "
            f"{rule.percent:g} %)"
        )
        detail = {"count": blocked, "total": total, "percent": round(rate, 1),
                  "run_ids": _run_ids(qs, listed)}  # fmt: skip
        found[scope] = Finding(summary, detail)
    return found


def _gate_waiting(rule: Rule, now: datetime, listed: int) -> dict[str, Finding]:
    cutoff = now - timedelta(minutes=rule.minutes)
    # gate_status_age: (status, created_at)
    waiting = _of_teams(
        rule, Gate.objects.filter(status=GateStatus.WAITING, created_at__lte=cutoff), "run__team"
    )
    key = {"agent": "run__agent", "tool": "tool", "team": "run__team"}.get(rule.per)
    rows = waiting.values(*([key] if key else [])).annotate(n=Count("id"), oldest=Min("created_at"))
    found = {}
    for row in rows.order_by():
        scope = str(row[key]) if key else ""
        qs = waiting.filter(**({key: scope} if key else {}))
        ids = list(qs.order_by("created_at").values_list("run_id", flat=True)[:listed])
        n = int(row["n"])
        summary = (
            f"{n} approval gate{'s' if n != 1 else ''}{_scoped(rule.per, scope)} waiting "
            f"longer than {rule.minutes:g} min (the oldest for {_ago(now, row['oldest'])})"
        )
        found[scope] = Finding(summary, {"count": n, "run_ids": list(dict.fromkeys(ids))})
    return found


def _recovery_lagging(rule: Rule, now: datetime, listed: int) -> dict[str, Finding]:
    cutoff = now - timedelta(seconds=rule.seconds)
    # run_lease_expiry: (status, lease_expires_at) — leases that died and were not recovered
    dead = Run.objects.filter(status=RunStatus.RUNNING, lease_expires_at__lt=cutoff)
    n = dead.count()
    beacon = Beacon.objects.filter(name="sweep").values_list("at", flat=True).first()
    silent = beacon is not None and beacon < cutoff
    if not n and not silent:
        return {}
    words = []
    if silent:
        words.append(f"the recovery sweep last ran {_ago(now, beacon)} ago")
    if n:
        words.append(f"{n} run{'s' if n != 1 else ''} of dead workers not recovered")
    summary = "Recovery lags: " + "; ".join(words) + f" (the rule: {rule.seconds:g} s)"
    ids = list(dead.order_by("lease_expires_at").values_list("run_id", flat=True)[:listed])
    detail = {"count": n, "sweep_at": beacon.isoformat() if beacon else None, "run_ids": ids}
    return {"": Finding(summary, detail)}


def alerts_open() -> QuerySet[Alert]:
    """The incidents not resolved, newest first."""
    return Alert.objects.exclude(status=AlertStatus.RESOLVED).order_by("-opened_at", "-id")


def alerts_recent(*, limit: int = 50) -> list[Alert]:
    """The incidents resolved lately, newest first."""
    return list(Alert.objects.filter(status=AlertStatus.RESOLVED).order_by("-resolved_at")[:limit])


# --- incidents by cause ---------------------------------------------------------------------


@dataclass(frozen=True)
class CauseGroup:
    """Stopped runs that share a cause: status, agent, step, reason and error signature."""

    status: str
    agent: str
    step: str
    reason: str
    signature: str
    count: int
    first_seen: datetime
    last_seen: datetime

    def query(self) -> dict[str, str]:
        """The group as query parameters (the bulk preview's ``scope=incident``)."""
        return {"i_status": self.status, "i_agent": self.agent, "i_step": self.step,
                "i_reason": self.reason, "i_sig": self.signature}  # fmt: skip


GROUPS_SHOWN = 200


def incident_groups(
    *,
    failed_since: datetime,
    limit: int = GROUPS_SHOWN,
    teams: Collection[str] | None = None,
) -> list[CauseGroup]:
    """The runs needing attention (all) and failed (since ``failed_since``) grouped by cause,
    largest first: one GROUP BY over the partial index ``run_incident``. Of the runs of
    ``teams`` (None: every team)."""
    stopped = scoped(
        Run.objects.filter(status__in=(RunStatus.NEEDS_ATTENTION, RunStatus.FAILED)), teams
    )
    rows = (
        stopped.filter(Q(status=RunStatus.NEEDS_ATTENTION) | Q(status_changed_at__gte=failed_since))
        .values("status", "agent", "cause_step", "reason", "signature")
        .annotate(n=Count("*"), first=Min("status_changed_at"), last=Max("status_changed_at"))
        .order_by("-n", "-last")[:limit]
    )
    return [
        CauseGroup(
            status=r["status"],
            agent=r["agent"],
            step=r["cause_step"],
            reason=r["reason"],
            signature=r["signature"],
            count=int(r["n"]),
            first_seen=r["first"],
            last_seen=r["last"],
        )
        for r in rows
    ]


def incident_runs(
    *,
    status: str,
    agent: str,
    step: str,
    reason: str,
    signature: str,
    failed_since: datetime,
    teams: Collection[str] | None = None,
) -> QuerySet[Run]:
    """The runs of one cause group, oldest first (of ``teams``; None: every team)."""
    qs = Run.objects.filter(
        status=status, agent=agent, cause_step=step, reason=reason, signature=signature
    )
    qs = scoped(qs, teams)
    if status == RunStatus.FAILED:
        qs = qs.filter(status_changed_at__gte=failed_since)
    return qs.order_by("status_changed_at", "run_id")


def tool_of_step(*, run_id: str, step_id: str) -> str:
    """The tool a run's step called ("" for none): what "pause this tool" pauses."""
    if not step_id:
        return ""
    found = Step.objects.filter(run_id=run_id, step_id=step_id).values_list("tool", flat=True)
    return str(found.first() or "")
