"""The Celery app: `celery -A runs worker` runs agents, `celery -A runs beat` runs the sweep.

Configuration lives in runs/settings/celery.py under the CELERY_ prefix (with the reasons).
"""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")

app = Celery("runs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs.operations"])


@after_setup_logger.connect
def _log_once(logger: logging.Logger, **kwargs: object) -> None:
    # Django's LOGGING gives the ledger and runs loggers a console handler; in a worker Celery's
    # root handler prints their records too (with the task's name), so keep only Celery's.
    for name in ("ledger", "runs"):
        logging.getLogger(name).handlers.clear()
    _json_lines(logger)


@after_setup_task_logger.connect
def _task_log(logger: logging.Logger, **kwargs: object) -> None:
    _json_lines(logger)


def _json_lines(logger: logging.Logger) -> None:
    """RUNLEDGER_LOG_FORMAT=json: Celery's own handlers write the project's JSON lines too."""
    from django.conf import settings

    if settings.RUNLEDGER_LOG_FORMAT != "json":
        return
    from runs.operations.logs import use_json

    for handler in logger.handlers:
        use_json(handler)


@worker_ready.connect
def _report_agent_modules(sender: object = None, **kwargs: object) -> None:
    """At start, a worker says which agent modules failed to import: in its log, and in a
    beacon that ``/readyz`` reports (``agent_modules``). It takes no run of an agent it lacks
    (``ledger.processes.execute``)."""
    from runs.operations import probes

    probes.worker_started(getattr(sender, "hostname", "") or "celery")


@worker_shutdown.connect
def _forget_agent_modules(sender: object = None, **kwargs: object) -> None:
    from runs.operations import probes

    probes.worker_stopped(getattr(sender, "hostname", "") or "celery")
