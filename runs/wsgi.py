"""The WSGI application (gunicorn: ``runs.gunicorn_conf``)."""

from __future__ import annotations

import logging
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
application = get_wsgi_application()
# Python's warnings as log records (py.warnings, through the root handler: JSON), not bare text
# on stderr; Celery's processes do the same.
logging.captureWarnings(True)
