"""The ledger's database: SQLite for the demo (no server), PostgreSQL in production."""

from __future__ import annotations

import dj_database_url

from runs.settings import env, sections
from runs.settings.base import VAR_DIR
from runs.settings.postgres import POSTGRES_ENGINES, configure_postgres

DATABASE_URL = (
    env.str(
        "DATABASE_URL",
        "",
        section=sections.DATABASE,
        shown="a SQLite file, RUNLEDGER_VAR_DIR/runledger.sqlite3",
        doc="The ledger's database, as a URL (`postgres://user:pass@host:5432/name`). PostgreSQL "
        "in production and in the tests; the SQLite default is for the demo.",
    )
    or f"sqlite:///{VAR_DIR / 'runledger.sqlite3'}"
)
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
RUNLEDGER_ALLOW_EMBEDDED = env.bool(
    "RUNLEDGER_ALLOW_EMBEDDED",
    False,
    section=sections.DATABASE,
    doc="Let web, worker and beat start on the embedded defaults (the SQLite ledger, the "
    "filesystem broker) with `DEBUG` off. Off, they refuse to start on either, in one line: "
    "production sets `DATABASE_URL` and `CELERY_BROKER_URL`. `make demo`, the development "
    "equipment and the test suite turn it on; so does one machine that means it.",
)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # BEGIN IMMEDIATE takes the write lock up front, so a fenced write's lease check and its
    # write cannot be split by another writer (the SQLite analogue of FOR SHARE).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        # WAL lets the dashboard read while a worker writes.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("TEST", {})
DATABASE_DISABLE_SERVER_SIDE_CURSORS = env.bool(
    "DATABASE_DISABLE_SERVER_SIDE_CURSORS",
    False,
    section=sections.DATABASE,
    doc="Django's `DISABLE_SERVER_SIDE_CURSORS`: turn on behind a pooler in transaction mode "
    "(PgBouncer's `pool_mode = transaction`), with `RUNLEDGER_PG_PREPARE=0`: a cursor that "
    "reads in chunks (retention, large pages) cannot outlive a transaction there.",
)
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = DATABASE_DISABLE_SERVER_SIDE_CURSORS

RUNLEDGER_DB_POOL_SIZE = env.int(
    "RUNLEDGER_DB_POOL_SIZE",
    10,
    section=sections.DATABASE,
    doc="PostgreSQL: the most connections one process holds (Django's psycopg pool, "
    "`OPTIONS['pool']`). A run takes a connection per step and gives it back, so a worker "
    "holding hundreds of runs needs no more than this; a thread that finds the pool empty waits "
    "`RUNLEDGER_DB_POOL_TIMEOUT_SECONDS`. `0` turns the pool off: one persistent connection per "
    "thread, kept 60 s (`CONN_MAX_AGE`), as before.",
)
RUNLEDGER_DB_POOL_TIMEOUT_SECONDS = env.float(
    "RUNLEDGER_DB_POOL_TIMEOUT_SECONDS",
    30.0,
    section=sections.DATABASE,
    doc="PostgreSQL with the pool on: how long a thread waits for a free connection before its "
    "query fails (a step's write fails as a lost database: the run is left to the sweep). Web "
    "processes (`runs.wsgi`) default to 5 s, so that a request answers a 500 rather than "
    "hanging while the database is down; setting this variable sets it for them too.",
)
RUNLEDGER_DB_IDLE_IN_TRANSACTION_SECONDS = env.float(
    "RUNLEDGER_DB_IDLE_IN_TRANSACTION_SECONDS",
    60.0,
    section=sections.DATABASE,
    doc="PostgreSQL: `idle_in_transaction_session_timeout` of every connection the product "
    "opens: a process frozen (SIGSTOP, a VM pause) inside a transaction loses its session and "
    "its locks after this long, never holds them for good. Sent as a startup option; with "
    "`DATABASE_DISABLE_SERVER_SIDE_CURSORS=1` (behind PgBouncer, which refuses startup "
    "options) as a `SET` on each new connection instead. `0` leaves the server's own.",
)
if DATABASES["default"]["ENGINE"] in POSTGRES_ENGINES:
    configure_postgres(
        DATABASES["default"],
        pool_size=RUNLEDGER_DB_POOL_SIZE,
        pool_timeout=RUNLEDGER_DB_POOL_TIMEOUT_SECONDS,
        idle_in_transaction=RUNLEDGER_DB_IDLE_IN_TRANSACTION_SECONDS,
        behind_pooler=DATABASE_DISABLE_SERVER_SIDE_CURSORS,
    )

# A fault test that cuts the workers' line to the ledger reaches the example downstream systems
# on another line, as a real payment provider or mail server would be: a cut ledger connection
# must not also be a failing provider (harness.routers).
RUNLEDGER_DOWNSTREAM_DATABASE_URL = env.str(
    "RUNLEDGER_DOWNSTREAM_DATABASE_URL",
    "",
    section=sections.EQUIPMENT,
    doc="Fault tests only: the example downstream systems' tables reached on a connection of "
    "their own (the same database), so that a cut ledger line is not also a failing provider.",
)
if RUNLEDGER_DOWNSTREAM_DATABASE_URL:
    DATABASES["downstream"] = dj_database_url.parse(RUNLEDGER_DOWNSTREAM_DATABASE_URL)
    DATABASE_ROUTERS = ["harness.routers.DownstreamRouter"]
