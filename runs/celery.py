"""The Celery app: `celery -A runs worker` runs agents, `celery -A runs beat` runs the sweep.

Configuration lives in runs/settings.py under the CELERY_ prefix (with the reasons).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")

app = Celery("runs")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["runs"])
