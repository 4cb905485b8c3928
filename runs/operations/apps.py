from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


class OperationsConfig(AppConfig):
    """The operations side: Celery tasks, probes, metrics, logs, the serve stack and the operator
    commands (``manage.py start_run`` …)."""

    name = "runs.operations"
    label = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Every run the ledger queues (a start, a resume, an operator's requeue, a settlement,
        # a continuation, the sweep's recovery) is announced once, after its commit, by
        # ledger.signals.run_queued: each goes to a worker from here.
        from ledger.signals import run_queued, runs_queued
        from runs.operations import checks  # noqa: F401 - its @register adds the system checks

        run_queued.connect(_enqueue, dispatch_uid="runs.enqueue_queued_run")
        runs_queued.connect(_enqueue_many, dispatch_uid="runs.enqueue_queued_runs")
        # Behind PgBouncer the session settings (idle_in_transaction_session_timeout) cannot be
        # startup options: one SET on each new connection (runs.settings.postgres).
        connection_created.connect(_session_settings, dispatch_uid="runs.session_settings")
        # The ledger's events counted for Prometheus (/metrics, runs.operations.metrics), in
        # PROMETHEUS_MULTIPROC_DIR's files when it is set: made (0700) if it is missing.
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(0o700, parents=True, exist_ok=True)
        from ledger import observe
        from runs.operations import metrics

        observe.subscribe(metrics.observe)
        _trace()


def _trace() -> None:
    """Traces of runs (RUNLEDGER_TRACES, runs.operations.tracing), set up once per process."""
    from django.conf import settings

    from ledger import observe
    from runs.operations import tracing

    global _tracer
    if _tracer is None:
        _tracer = tracing.configure(settings.RUNLEDGER_TRACES)
        if _tracer is not None:
            observe.subscribe(_tracer)


_tracer: Any = None


#: The psycopg connections already given SESSION_SETTINGS: a pooled connection is "created"
#: for Django at every checkout, but needs its SET once.
_session_set: weakref.WeakSet[Any] = weakref.WeakSet()


def _session_settings(sender: Any, connection: Any, **kwargs: Any) -> None:
    wanted = connection.settings_dict.get("SESSION_SETTINGS")
    raw = connection.connection
    if not wanted or connection.vendor != "postgresql" or raw is None or raw in _session_set:
        return
    with connection.cursor() as cursor:
        for name, value in wanted.items():
            cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
    _session_set.add(raw)


def _enqueue(sender: Any, run_id: str, cause: str, **kwargs: Any) -> None:
    """A new run goes to the start task, any other to the resume task (after the commit that
    queued it: the signal is sent then). A run released for a retry's back-off goes with its
    ``eta``: the message waits until the run is claimable."""
    from ledger.signals import NEW_RUN_CAUSES
    from runs.operations.tasks import send_resume, send_start

    if kwargs.get("batched"):
        return  # its batch was published whole by _enqueue_many
    eta = kwargs.get("eta")
    if cause in NEW_RUN_CAUSES:
        send_start(run_id, eta=eta)
    elif eta is not None:
        send_resume(run_id, eta=eta)
    else:
        send_resume(run_id, recovered=cause in RECOVERED_CAUSES)


def _enqueue_many(sender: Any, run_ids: list[str], cause: str, **kwargs: Any) -> None:
    """A batch start's runs, published together over one broker connection."""
    from ledger.signals import NEW_RUN_CAUSES
    from runs.operations.tasks import send_resume, send_starts

    if cause in NEW_RUN_CAUSES:
        send_starts(run_ids)
    else:
        for run_id in run_ids:
            send_resume(run_id, recovered=cause in RECOVERED_CAUSES)


#: Runs that were taken from a worker (its lease expired, it handed them back) or whose message
#: was lost, held-back runs offered a freed concurrency slot, and runs outranked at their claim
#: by a run of higher priority: their resume does not queue behind the backlog
#: (RUNLEDGER_RECOVERED_QUEUE).
RECOVERED_CAUSES = frozenset({"recovery", "handback", "slot", "outranked"})
