"""Email (Django's mail framework, for notifications) and retention (``manage.py prune_runs``).

The notification channels themselves (webhook, email addresses, back-off) are ledger settings,
declared in ``ledger.conf``: each notification is an outbox row written with its event and
delivered by the beat task ``runledger.notifications`` (and at once after the event).
"""

from __future__ import annotations

from runs.settings import env, sections
from runs.settings.base import STORAGES, VAR_DIR
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

# Where the step rows of pruned runs go: the archive store, a Django storage under the alias
# "runledger-archive" (ledger.processes.retention), a local directory or an S3-compatible bucket.
RUNLEDGER_ARCHIVE_DIR = env.path(
    "RUNLEDGER_ARCHIVE_DIR",
    VAR_DIR / "archive",
    section=sections.RETENTION,
    shown="RUNLEDGER_VAR_DIR/archive",
    doc="The archive store when no bucket is set: a local directory, files as "
    "`<dir>/<YYYY-MM>/<time>-<token>.jsonl.gz`. Share it (a network mount) or use a bucket for "
    "`show_archive` to read archives on every machine.",
)
RUNLEDGER_ARCHIVE_S3_BUCKET = env.str(
    "RUNLEDGER_ARCHIVE_S3_BUCKET",
    "",
    section=sections.RETENTION,
    doc="Archive to this S3-compatible bucket instead of a directory (`pip install "
    "'runledger[s3]'`, django-storages on boto3; credentials and region from boto3's own "
    "environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, or an "
    "instance role).",
)
RUNLEDGER_ARCHIVE_S3_PREFIX = env.str(
    "RUNLEDGER_ARCHIVE_S3_PREFIX",
    "runledger/archive",
    section=sections.RETENTION,
    doc="The key prefix of the archives in the bucket.",
)
RUNLEDGER_ARCHIVE_S3_ENDPOINT_URL = env.str(
    "RUNLEDGER_ARCHIVE_S3_ENDPOINT_URL",
    "",
    section=sections.RETENTION,
    shown="(empty: AWS)",
    doc="The endpoint of an S3-compatible server that is not AWS (MinIO, Ceph, a cloud's own).",
)
if RUNLEDGER_ARCHIVE_S3_BUCKET:
    STORAGES["runledger-archive"] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": RUNLEDGER_ARCHIVE_S3_BUCKET,
            "location": RUNLEDGER_ARCHIVE_S3_PREFIX,
            "endpoint_url": RUNLEDGER_ARCHIVE_S3_ENDPOINT_URL or None,
            "file_overwrite": True,  # names are unique: no HEAD request before each upload
        },
    }
else:
    STORAGES["runledger-archive"] = {
        "BACKEND": "ledger.processes.retention.DirectoryStorage",
        "OPTIONS": {"location": str(RUNLEDGER_ARCHIVE_DIR)},
    }
RUNLEDGER_PRUNE_AFTER_DAYS = env.int(
    "RUNLEDGER_PRUNE_AFTER_DAYS",
    0,
    section=sections.RETENTION,
    doc="Set (in days) to let beat prune runs finished longer ago than that, every "
    "`RUNLEDGER_PRUNE_EVERY_SECONDS`. 0: never by itself (`manage.py prune_runs` still works).",
)
RUNLEDGER_PRUNE_EVERY_SECONDS = env.int(
    "RUNLEDGER_PRUNE_EVERY_SECONDS",
    300,
    section=sections.RETENTION,
    doc="How often beat prunes (with `RUNLEDGER_PRUNE_AFTER_DAYS` set). A tick that is still "
    "queued when the next one is due is dropped.",
)
RUNLEDGER_PRUNE_BUDGET_SECONDS = env.int(
    "RUNLEDGER_PRUNE_BUDGET_SECONDS",
    60,
    section=sections.RETENTION,
    doc="How long one beat tick prunes, a file of runs at a time, before it leaves the rest to "
    "the next tick (it holds one worker slot meanwhile). Keep it below "
    "`RUNLEDGER_PRUNE_EVERY_SECONDS`.",
)
RUNLEDGER_PRUNE_RUNS_PER_FILE = env.int(
    "RUNLEDGER_PRUNE_RUNS_PER_FILE",
    2000,
    section=sections.RETENTION,
    doc="How many runs' step rows go into one archive file (one upload to a bucket).",
)
if RUNLEDGER_PRUNE_AFTER_DAYS > 0:
    CELERY_BEAT_SCHEDULE["runledger-prune"] = {
        "task": "runledger.prune",
        "schedule": float(RUNLEDGER_PRUNE_EVERY_SECONDS),
        "options": {"expires": float(RUNLEDGER_PRUNE_EVERY_SECONDS)},
    }
