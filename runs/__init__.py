"""The runledger Django project: settings, URLs, the Celery app, the dashboard and the workers."""

from __future__ import annotations

# Load the Celery app with Django, so that @shared_task binds to it and on_commit enqueues work.
from runs.celery import app as celery_app

__all__ = ("celery_app",)
