"""The runledger Django project.

- the wiring, here: settings (``runs.settings``, split by concern), URLs, the Celery app and its
  broker, WSGI, gunicorn's configuration, and the ``runledger`` command (``runs.cli``);
- ``runs.dashboard``: the operator dashboard (views, forms, template tags, its URLs) and the
  permissions and roles it checks;
- ``runs.operations``: the Celery tasks, the probes, metrics and logs, the serve stack and the
  operator commands.

It imports ``ledger`` and calls its functions; it never writes ledger rows itself, and it never
imports the development equipment (``harness``).
"""

from __future__ import annotations

# Load the Celery app with Django, so that @shared_task binds to it and on_commit enqueues work.
from runs.celery import app as celery_app

__all__ = ("celery_app",)
