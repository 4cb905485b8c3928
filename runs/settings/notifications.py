"""Email (Django's mail framework, for notifications) and retention (``manage.py prune_runs``).

The notification channels themselves (webhook, email addresses, back-off) are ledger settings,
declared in ``ledger.conf``: each notification is an outbox row written with its event and
delivered by the beat task ``runledger.notifications`` (and at once after the event).
"""

from __future__ import annotations

from runs.settings import env, sections
from runs.settings.base import VAR_DIR
from runs.settings.celery import CELERY_BEAT_SCHEDULE

EMAIL_BACKEND = env.str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend",
    section=sections.EMAIL,
    doc="Django's email backend (SMTP by default).",
)
EMAIL_HOST = env.str("EMAIL_HOST", "localhost", section=sections.EMAIL, doc="The SMTP server.")
EMAIL_PORT = env.int("EMAIL_PORT", 25, section=sections.EMAIL, doc="The SMTP server's port.")
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", "", section=sections.EMAIL, doc="The SMTP user name.")
EMAIL_HOST_PASSWORD = env.str(
    "EMAIL_HOST_PASSWORD", "", section=sections.EMAIL, doc="The SMTP password."
)
EMAIL_USE_TLS = env.bool(
    "EMAIL_USE_TLS", False, section=sections.EMAIL, doc="STARTTLS to the server."
)

# Where the step rows of pruned runs go, as <dir>/<YYYY-MM>/<run_id>.jsonl.gz.
RUNLEDGER_ARCHIVE_DIR = env.path(
    "RUNLEDGER_ARCHIVE_DIR",
    VAR_DIR / "archive",
    section=sections.RETENTION,
    shown="RUNLEDGER_VAR_DIR/archive",
    doc="Where the step rows of pruned runs are archived, as `<dir>/<YYYY-MM>/<run_id>.jsonl.gz`.",
)
RUNLEDGER_PRUNE_AFTER_DAYS = env.int(
    "RUNLEDGER_PRUNE_AFTER_DAYS",
    0,
    section=sections.RETENTION,
    doc="Set (in days) to let beat prune runs finished longer ago than that, once a day. "
    "0: never by itself (`manage.py prune_runs` still works).",
)
if RUNLEDGER_PRUNE_AFTER_DAYS > 0:
    CELERY_BEAT_SCHEDULE["runledger-prune"] = {"task": "runledger.prune", "schedule": 24 * 3600.0}
