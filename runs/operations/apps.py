from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """The operations side: Celery tasks, probes, metrics, logs, the serve stack and the operator
    commands (``manage.py start_run`` …)."""

    name = "runs.operations"
    label = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Runs the ledger queues (a start, a resume, an operator's requeue, a continuation) are
        # announced once, after their commit, by ledger.signals.run_queued: enqueue each here.
        from ledger.signals import run_queued

        run_queued.connect(_enqueue_start, dispatch_uid="runs.enqueue_queued_run")
        # The ledger's events counted for Prometheus (/metrics, runs.operations.metrics).
        from ledger import observe
        from runs.operations import metrics

        observe.subscribe(metrics.observe)


def _enqueue_start(sender: Any, run_id: str, cause: str, **kwargs: Any) -> None:
    from runs.operations.tasks import enqueue_start

    enqueue_start(run_id)
