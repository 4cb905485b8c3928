from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Runs the ledger queues by itself (continue-as-new) go to a worker like any other.
        from ledger.signals import run_queued

        run_queued.connect(_enqueue_start, dispatch_uid="runs.enqueue_queued_run")
        # The ledger's events counted for Prometheus (/metrics, runs.metrics).
        from ledger import observe
        from runs import metrics

        observe.subscribe(metrics.observe)


def _enqueue_start(sender: Any, run_id: str, cause: str, **kwargs: Any) -> None:
    from runs.tasks import enqueue_start

    enqueue_start(run_id)
