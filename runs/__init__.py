"""The runledger Django project: the wiring (settings, URLs, the Celery app and its broker, WSGI),
the Celery tasks, the commands, the dashboard's permissions and roles, and the dashboard itself
(``runs.dashboard``).

It imports ``ledger`` and calls its functions; it never writes ledger rows itself. No production
module here imports the kill-test harness (``harness``) or ``ledger.examples.faults``: the
harness reaches into the tasks only through ``runs.tasks.after_execute_hook``, which it installs.
"""

from __future__ import annotations

# Load the Celery app with Django, so that @shared_task binds to it and on_commit enqueues work.
from runs.celery import app as celery_app

__all__ = ("celery_app",)
