"""Where the example downstream systems live when a fault test separates them from the ledger.

With ``RUNLEDGER_DOWNSTREAM_DATABASE_URL`` set, the settings add a ``downstream`` database (the
same PostgreSQL database, reached on its own connection) and this router: the simulators' rows
go through it, the ledger's through ``default``. Migrations run on ``default`` only.
"""

from __future__ import annotations

from typing import Any

ALIAS = "downstream"


class DownstreamRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return ALIAS if model._meta.app_label == "examples" else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return ALIAS if model._meta.app_label == "examples" else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db == ALIAS else None
