"""What web, worker and beat check before they serve: that they are not about to run a
production process on the embedded defaults by accident, and that the database is migrated.

Each refusal is one line (``runledger worker: …``) and an exit, never a process that starts and
then fails every task with "no such table". ``RUNLEDGER_ALLOW_EMBEDDED`` (or ``DEBUG``) allows
the SQLite ledger and the filesystem broker; nothing allows an unmigrated database.
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("runs.startup")

#: The exit code of a refusal (gunicorn halts on it too: a worker that cannot boot).
EXIT_REFUSED = 3


def embedded_defaults() -> list[str]:
    """The embedded parts this process is configured with, as a person reads them."""
    from django.conf import settings

    found = []
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        found.append("the ledger is a SQLite file (set DATABASE_URL to PostgreSQL)")
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        found.append("the broker is the filesystem (set CELERY_BROKER_URL to Redis or RabbitMQ)")
    return found


def why_not_start(process: str) -> str:
    """Why ``process`` (web, worker, beat) must not start, in one line; "" when it may."""
    from django.conf import settings

    embedded = embedded_defaults()
    if embedded and not settings.DEBUG and not settings.RUNLEDGER_ALLOW_EMBEDDED:
        return (
            f"runledger {process}: refusing to start with DEBUG off on the embedded defaults: "
            + "; ".join(embedded)
            + ". RUNLEDGER_ALLOW_EMBEDDED=1 starts on them anyway (one machine, a demo)."
        )
    missing = unapplied_migrations()
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return (
            f"runledger {process}: the database is not migrated ({missing[0]}{more} not "
            "applied): run `runledger migrate` first."
        )
    return ""


def unapplied_migrations() -> list[str]:
    """The migrations the database lacks (``app.name``); none when it does not answer (the
    process starts, and its tasks retry until it does)."""
    from django.db import DatabaseError, connection
    from django.db.migrations.executor import MigrationExecutor

    from ledger.engine import pooling

    down = pooling.unreachable()  # at once, not after the pool's timeout
    if down:
        log.warning("the database does not answer at start (%s): starting anyway", down)
        return []
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        log.warning("the database does not answer at start (%s): starting anyway", exc)
        return []
    finally:
        # No connection carried into forked children, nor one kept idle by the pool (it keeps
        # one open): `runledger worker`'s supervisor checks, then only waits on its processes.
        pooling.close_pool()
    return [f"{m.app_label}.{m.name}" for m, backwards in plan if not backwards]


def refuse_or_go(process: str) -> None:
    """Exit with one line on stderr when ``process`` must not start."""
    import django

    django.setup()
    why = why_not_start(process)
    if why:
        sys.stderr.write(why + "\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_REFUSED)
