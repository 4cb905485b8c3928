"""The WSGI application (gunicorn: ``runs.gunicorn_conf``)."""

from __future__ import annotations

import logging
import os

from django.core.wsgi import get_wsgi_application

from runs.startup import refuse_or_go

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
application = get_wsgi_application()
# With DEBUG off, never serve on the embedded defaults by accident, nor an unmigrated database:
# one line and exit (gunicorn halts: its worker could not boot).
refuse_or_go("web")
# Python's warnings as log records (py.warnings, through the root handler: JSON), not bare text
# on stderr; Celery's processes do the same.
logging.captureWarnings(True)
