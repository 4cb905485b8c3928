"""Prometheus metrics: counters the ledger reports (ledger.observe) and gauges read at scrape.

Counters and the histogram live in the process that did the work (a gunicorn worker, a Celery
pool child). With ``PROMETHEUS_MULTIPROC_DIR`` set (the serve stack sets it; it must be set
before any process starts) prometheus_client keeps them in files there, and ``/metrics`` in any
web process — or ``metrics_exporter`` on a machine without a web — adds up every process's
files. The directory is one per machine, shared by its web, worker and beat, and never emptied
while any of them runs: a process that starts forgets only the files of processes that are gone
(``forget_dead_processes``: their live gauges; their counters stay in the totals). It empties
at boot (``/run`` is a tmpfs) or by ``serve``, which owns every process writing there. Without
it each process counts for itself (one-process set-ups, tests).

The gauges (runs by status and reason, settlements waiting, approval gates by status, sweep
lag) are read from the ledger when ``/metrics`` is scraped: they are true whichever process
wrote the rows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

STEPS_WRITTEN = Counter(
    "runledger_steps_written",
    "Ledger step writes committed, by step kind and the status written.",
    ["kind", "status"],
)
STEP_WRITE_SECONDS = Histogram(
    "runledger_step_write_seconds",
    "Duration of one fenced step write (one statement and commit on PostgreSQL).",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
RESUMES = Counter("runledger_resumes", "Executions of a run after its first (resume or recovery).")
RECONCILIATIONS = Counter(
    "runledger_reconciliations",
    "Started effects asked about through their effect key, by the answer.",
    ["answer"],
)
LEASE_EXPIRIES = Counter(
    "runledger_lease_expiries", "Runs the sweep re-queued because their lease expired."
)
SWEEPS = Counter("runledger_sweeps", "Passes of the recovery sweep.")
NOTIFICATIONS = Counter(
    "runledger_notification_deliveries",
    "Notification delivery attempts, by channel and outcome (sent, failed).",
    ["channel", "outcome"],
)
COUNTED = (
    STEPS_WRITTEN,
    STEP_WRITE_SECONDS,
    RESUMES,
    RECONCILIATIONS,
    LEASE_EXPIRIES,
    SWEEPS,
    NOTIFICATIONS,
)


_step_children: dict[tuple[str, str], tuple[Any, Any]] = {}


def _step_metrics(kind: str, status: str) -> tuple[Any, Any]:
    """The labelled counter and histogram of one kind and status, looked up once (``labels()``
    takes a lock and builds a key on every call; this path runs once per step)."""
    children = _step_children.get((kind, status))
    if children is None:
        children = (STEPS_WRITTEN.labels(kind, status), STEP_WRITE_SECONDS.labels(kind))
        _step_children[(kind, status)] = children
    return children


def observe(event: str, fields: Mapping[str, Any]) -> None:
    """The ledger's events as counter increments (no I/O: cheap on the engine's hot path)."""
    if event == "step_written":
        counter, histogram = _step_metrics(fields["kind"], fields["status"])
        counter.inc(fields.get("count", 1))  # a batch's rows of one kind: one event
        histogram.observe(fields["seconds"])
    elif event == "run_resumed":
        RESUMES.inc()
    elif event == "reconciled":
        RECONCILIATIONS.labels(fields["answer"]).inc()
    elif event == "lease_expired":
        LEASE_EXPIRIES.inc()
    elif event == "sweep":
        SWEEPS.inc()
    elif event == "notification":
        NOTIFICATIONS.labels(fields["channel"], fields["outcome"]).inc()


class LedgerCollector(Collector):
    """Gauges read from the ledger at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from ledger.models import (
            Beacon,
            Gate,
            GateStatus,
            Notification,
            Run,
            Settlement,
            SettlementStatus,
        )

        runs = GaugeMetricFamily(
            "runledger_runs", "Runs by status and reason.", labels=["status", "reason"]
        )
        rows = Run.objects.values("status", "reason").annotate(n=Count("pk")).order_by()
        for row in rows:
            runs.add_metric([row["status"], row["reason"] or ""], row["n"])
        yield runs
        now = timezone.now()
        waiting = Settlement.objects.filter(status=SettlementStatus.PROPOSED).aggregate(
            n=Count("pk"), oldest=Min("created_at")
        )
        yield GaugeMetricFamily(
            "runledger_settlements_waiting",
            "Settlement proposals waiting for a second person's approval.",
            value=waiting["n"],
        )
        oldest = waiting["oldest"]
        yield GaugeMetricFamily(
            "runledger_settlement_oldest_age_seconds",
            "Age of the oldest settlement proposal waiting (0 when none waits).",
            value=(now - oldest).total_seconds() if oldest else 0.0,
        )
        gates = GaugeMetricFamily(
            "runledger_gates",
            "Approval gates by status (waiting, approved, used, rejected, void).",
            labels=["status"],
        )
        for status, n in Gate.objects.values_list("status").annotate(n=Count("pk")).order_by():
            gates.add_metric([status], n)
        yield gates
        oldest_gate = Gate.objects.filter(status=GateStatus.WAITING).aggregate(
            oldest=Min("created_at")
        )["oldest"]
        yield GaugeMetricFamily(
            "runledger_gate_oldest_waiting_age_seconds",
            "Age of the oldest approval gate waiting for a decision (0 when none waits).",
            value=(now - oldest_gate).total_seconds() if oldest_gate else 0.0,
        )
        notifications = GaugeMetricFamily(
            "runledger_notifications",
            "Notifications by channel and delivery status (pending, sent, failed: given up).",
            labels=["channel", "status"],
        )
        counts = Notification.objects.values_list("channel", "status").annotate(n=Count("pk"))
        by_label: dict[tuple[str, str], int] = {}
        for channel, status, n in counts.order_by():
            # Completion events: one label for every subscription (its id would be unbounded).
            key = ("subscription" if channel.startswith("subscription:") else channel, status)
            by_label[key] = by_label.get(key, 0) + n
        for (channel, status), n in sorted(by_label.items()):
            notifications.add_metric([channel, status], n)
        yield notifications
        yield _pauses()
        yield from _pacing(now)
        beacon = Beacon.objects.filter(name="sweep").first()
        yield GaugeMetricFamily(
            "runledger_sweep_lag_seconds",
            "Seconds since the recovery sweep last ran (-1: it never ran).",
            value=(now - beacon.at).total_seconds() if beacon else -1.0,
        )


def _pauses() -> GaugeMetricFamily:
    """Active pauses and the runs each holds (the runs also count in ``runledger_runs`` with
    status ``paused``)."""
    from ledger import selectors

    held = GaugeMetricFamily(
        "runledger_pause_held_runs",
        "Runs held by the active pauses: per paused tool or agent; run pauses summed (target *).",
        labels=["scope", "target"],
    )
    totals: dict[tuple[str, str], int] = {}
    for pause in selectors.pauses_list(active=True)[:1000]:
        key = (pause.scope, "*" if pause.scope == "run" else pause.target)
        totals[key] = totals.get(key, 0) + pause.held
    for (scope, target), n in sorted(totals.items()):
        held.add_metric([scope, target], n)
    return held


#: The concurrency keys exported one by one: the busiest (most held back) this many; the rest
#: summed under the key ``(other)``. Keys are made of inputs (a customer id), so unbounded.
KEYS_EXPORTED = 20


def _pacing(now: Any) -> Iterator[GaugeMetricFamily]:
    """Per concurrency key (the busiest ``KEYS_EXPORTED``, then ``(other)``) and per rate limit
    (each one named in the code or the settings: bounded by the configuration), what runs and
    what is held back."""
    from ledger.selectors import pacing

    keys, other = pacing.concurrency_keys(limit=KEYS_EXPORTED)
    running = GaugeMetricFamily(
        "runledger_concurrency_running",
        f"Runs executing per concurrency key (the {KEYS_EXPORTED} busiest; the rest as (other)).",
        labels=["key"],
    )
    held = GaugeMetricFamily(
        "runledger_concurrency_held",
        "Runs queued per concurrency key, held back or about to start (same keys).",
        labels=["key"],
    )
    for load in [*keys, other]:
        running.add_metric([load.key], load.running)
        held.add_metric([load.key], load.queued)
    yield running
    yield held
    labels = ["key", "budget"]
    waiting = GaugeMetricFamily(
        "runledger_rate_limit_calls_waiting",
        "Calls waiting for a rate-limit slot (slots taken beyond now), per limit.",
        labels=labels,
    )
    released = GaugeMetricFamily(
        "runledger_rate_limit_runs_released",
        "Runs released to wait for their rate-limit slot (holding no worker), per limit.",
        labels=labels,
    )
    next_in = GaugeMetricFamily(
        "runledger_rate_limit_next_slot_seconds",
        "Seconds until a rate limit's next free slot (0: free now), per limit.",
        labels=labels,
    )
    blocked = GaugeMetricFamily(
        "runledger_rate_limit_blocked_seconds",
        "Seconds a provider's 429 (retry-after) still blocks a rate limit, per limit.",
        labels=labels,
    )
    taken = GaugeMetricFamily(
        "runledger_rate_limit_taken",
        "Slots taken (calls let through) since the limit's row was made, per limit.",
        labels=labels,
    )
    for limit in pacing.rate_limits(now=now)[:200]:
        values = [limit.key, limit.budget]
        waiting.add_metric(values, limit.calls_waiting)
        released.add_metric(values, limit.released)
        next_in.add_metric(values, limit.next_in)
        blocked.add_metric(values, limit.blocked_for)
        taken.add_metric(values, limit.taken)
    yield from (waiting, released, next_in, blocked, taken)


def exposition(*, ledger: bool = True) -> tuple[bytes, str]:
    """The text Prometheus scrapes, and its content type. ``ledger=False`` (a worker-only
    machine's exporter) leaves out the gauges read from the ledger: the web reports those, and
    every exporter reporting them too would count each run once per machine."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        for metric in COUNTED:
            registry.register(metric)
    if ledger:
        registry.register(LedgerCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST


_PID = re.compile(r"_(\d+)\.db$")


def forget_dead_processes(directory: str | None = None) -> list[int]:
    """Mark every process whose files are in the multiprocess directory and that no longer runs
    as dead (prometheus_client's ``mark_process_dead``: its live gauges go, its counters stay);
    create the directory (0700) if it is missing. The pids marked."""
    path = Path(directory or os.environ["PROMETHEUS_MULTIPROC_DIR"])
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    pids = {int(m.group(1)) for f in path.glob("*.db") if (m := _PID.search(f.name))}
    dead = sorted(pid for pid in pids if not _alive(pid))
    for pid in dead:
        multiprocess.mark_process_dead(pid, str(path))
    return dead


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs, as another user
    return True
