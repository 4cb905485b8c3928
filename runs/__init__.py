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

from ledger.moved import keep

# Load the Celery app with Django, so that @shared_task binds to it and on_commit enqueues work.
from runs.celery import app as celery_app

# runs.tasks moved to runs.operations.tasks: the old name warns (ledger/moved.py).
keep({"runs.tasks": ("runs.operations.tasks",)})

__all__ = ("celery_app",)
