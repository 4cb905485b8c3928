"""The WSGI application (gunicorn: ``runs.gunicorn_conf``)."""

from __future__ import annotations

import logging
import os

from django.core.wsgi import get_wsgi_application

from runs.startup import refuse_or_go

WEB_POOL_TIMEOUT = "5"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
# A page or an API call waits for a database connection at most WEB_POOL_TIMEOUT seconds, not
# the workers' 30: with the database down, the pool would hold each request until gunicorn's
# own timeout, where it answers a 500 (logged with its request id) at once without a pool.
# RUNLEDGER_DB_POOL_TIMEOUT_SECONDS set in the environment applies here too.
os.environ.setdefault("RUNLEDGER_DB_POOL_TIMEOUT_SECONDS", WEB_POOL_TIMEOUT)
application = get_wsgi_application()
# With DEBUG off, never serve on the embedded defaults by accident, nor an unmigrated database:
# one line and exit (gunicorn halts: its worker could not boot).
refuse_or_go("web")
# Python's warnings as log records (py.warnings, through the root handler: JSON), not bare text
# on stderr; Celery's processes do the same.
logging.captureWarnings(True)
