"""How the product's PostgreSQL connections are made (runs.settings.postgres): a bounded pool per
process, and ``idle_in_transaction_session_timeout`` on every session — as a startup option, or
as one SET per new connection behind PgBouncer, which refuses startup options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper

from harness.cluster import wait_for
from runs.settings.postgres import configure_postgres

ROOT = Path(__file__).resolve().parents[3]
IDLE = "idle_in_transaction_session_timeout"


def _configured(**overrides: object) -> dict:
    db: dict = {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 60, "OPTIONS": {}}
    db.update(overrides.pop("db", {}))  # type: ignore[arg-type]
    kwargs = {"pool_size": 10, "pool_timeout": 30.0, "idle_in_transaction": 60.0}
    configure_postgres(db, **{**kwargs, "behind_pooler": False, **overrides})  # type: ignore[arg-type]
    return db


def test_the_pool_is_bounded_and_replaces_persistent_connections() -> None:
    db = _configured()
    assert db["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 10, "timeout": 30.0}
    assert db["CONN_MAX_AGE"] == 0  # Django refuses a pool with persistent connections
    assert db["OPTIONS"]["options"] == f"-c {IDLE}=60000"
    off = _configured(pool_size=0)
    assert "pool" not in off["OPTIONS"] and off["CONN_MAX_AGE"] == 60


def test_the_urls_own_options_are_kept() -> None:
    db = _configured(db={"OPTIONS": {"options": "-c statement_timeout=3000"}})
    assert db["OPTIONS"]["options"] == f"-c statement_timeout=3000 -c {IDLE}=60000"
    own = _configured(db={"OPTIONS": {"options": f"-c {IDLE}=5000"}})
    assert own["OPTIONS"]["options"] == f"-c {IDLE}=5000"


def test_behind_a_pooler_the_timeout_is_a_set_not_a_startup_option() -> None:
    db = _configured(behind_pooler=True)
    assert "options" not in db["OPTIONS"]
    assert db["SESSION_SETTINGS"] == {IDLE: "60000ms"}


def test_sqlite_gets_no_pool(tmp_path) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    environ.update(
        RUNLEDGER_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'x.sqlite3'}",
        DJANGO_SETTINGS_MODULE="runs.settings",
    )
    code = (
        "import json; from django.conf import settings as s; "
        "print(json.dumps(s.DATABASES['default']['OPTIONS']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "pool" not in json.loads(done.stdout)


@pytest.mark.django_db
def test_every_session_of_the_product_has_the_idle_in_transaction_timeout() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's setting")
    with connection.cursor() as cur:
        cur.execute(f"SHOW {IDLE}")
        assert cur.fetchone()[0] == "1min"


def _wrapper(settings_dict: dict) -> DatabaseWrapper:
    return DatabaseWrapper(settings_dict, alias="session-settings-test")


@pytest.mark.django_db(transaction=True)
def test_behind_a_pooler_each_new_connection_gets_the_timeout_by_set() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's setting")
    sd = dict(connection.settings_dict)
    options = {k: v for k, v in sd["OPTIONS"].items() if k not in ("pool", "options")}
    sd = {**sd, "OPTIONS": options, "CONN_MAX_AGE": 0}
    configure_postgres(
        sd, pool_size=0, pool_timeout=1.0, idle_in_transaction=0.5, behind_pooler=True
    )
    other = _wrapper(sd)
    try:
        with other.cursor() as cur:
            cur.execute(f"SHOW {IDLE}")
            assert cur.fetchone()[0] == "500ms"
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        # A session frozen inside a transaction is ended by the server: its locks go with it.
        other.set_autocommit(False)
        with other.cursor() as cur:
            cur.execute("SELECT 1")

        def gone() -> bool:
            with connection.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                return cur.fetchone()[0] == 0

        assert wait_for(gone, timeout=60, interval=0.1)
    finally:
        try:
            other.close()
        except Exception:
            other.connection = None
