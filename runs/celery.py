"""The Celery app: `celery -A runs worker` runs agents, `celery -A runs beat` runs the sweep.

Configuration lives in runs/settings.py under the CELERY_ prefix (with the reasons).
"""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")

app = Celery("runs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])


@after_setup_logger.connect
def _log_once(logger: logging.Logger, **kwargs: object) -> None:
    # Django's LOGGING gives the ledger and runs loggers a console handler; in a worker Celery's
    # root handler prints their records too (with the task's name), so keep only Celery's.
    for name in ("ledger", "runs"):
        logging.getLogger(name).handlers.clear()
