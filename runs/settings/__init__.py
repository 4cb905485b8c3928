"""runledger's settings (``DJANGO_SETTINGS_MODULE=runs.settings``), split by concern.

Every knob is an environment variable with a working default, so that ``make demo`` needs no
server: the ledger defaults to a SQLite file under ``RUNLEDGER_VAR_DIR`` and production points
``DATABASE_URL`` at PostgreSQL. Each variable is declared once — the project's in these modules
through ``runs.settings.env``, the ledger app's in ``ledger.conf`` — and the configuration
reference in the docs is generated from those declarations.
"""

from __future__ import annotations

from runs.settings.api import *  # noqa: F403
from runs.settings.base import *  # noqa: F403
from runs.settings.celery import *  # noqa: F403
from runs.settings.dashboard import *  # noqa: F403
from runs.settings.database import *  # noqa: F403
from runs.settings.ledger import *  # noqa: F403
from runs.settings.notifications import *  # noqa: F403
from runs.settings.observability import *  # noqa: F403
from runs.settings.processes import *  # noqa: F403
from runs.settings.security import *  # noqa: F403
from runs.settings.sso import *  # noqa: F403
