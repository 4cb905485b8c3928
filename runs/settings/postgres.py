"""How the product's PostgreSQL connections are made: a bounded pool per process, and a bound on
how long a session may sit idle inside a transaction (see ``runs.settings.database``)."""

from __future__ import annotations

from typing import Any

POSTGRES_ENGINES = ("django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis")
IDLE_SETTING = "idle_in_transaction_session_timeout"


def configure_postgres(
    db: Any,  # dj_database_url's DBConfig (a TypedDict), or a plain dict
    *,
    pool_size: int,
    pool_timeout: float,
    idle_in_transaction: float,
    behind_pooler: bool,
) -> None:
    """Adjust one ``DATABASES`` entry in place.

    - ``pool_size`` > 0: Django's psycopg pool (``OPTIONS["pool"]``), at most ``pool_size``
      connections per process, one kept open. Django refuses a pool with persistent
      connections, so ``CONN_MAX_AGE`` becomes 0 (closing a connection gives it back).
    - ``idle_in_transaction`` > 0: every session gets that ``idle_in_transaction_session_timeout``,
      as a startup option (no round trip); behind a pooler in transaction mode (PgBouncer
      refuses startup options) ``SESSION_SETTINGS`` instead, which ``runs.operations.apps``
      sends as one ``SET`` on each new connection. A value already in the URL's ``options``
      is kept.
    """
    options = db.setdefault("OPTIONS", {})
    if pool_size > 0:
        options["pool"] = {"min_size": 1, "max_size": pool_size, "timeout": pool_timeout}
        db["CONN_MAX_AGE"] = 0
    if idle_in_transaction <= 0 or IDLE_SETTING in str(options.get("options", "")):
        return
    ms = max(1, round(idle_in_transaction * 1000))
    if behind_pooler:
        db["SESSION_SETTINGS"] = {IDLE_SETTING: f"{ms}ms"}
        return
    startup = f"-c {IDLE_SETTING}={ms}"
    options["options"] = f"{options['options']} {startup}" if options.get("options") else startup
