"""A connection per step, given back: the rule that keeps a worker's PostgreSQL connections a
small constant whatever the number of runs it holds.

With the pool on (PostgreSQL, ``RUNLEDGER_DB_POOL_SIZE`` > 0: Django's own psycopg pool,
``DATABASES["default"]["OPTIONS"]["pool"]``), a thread takes a connection from its process's
pool at its first query and holds it until it closes it. A run's thread that kept it would hold
it while its agent waits on a model or a tool for seconds. So every ledger write of a step, and
every step as a whole, ends with ``release()``: the connection goes back to the pool, and the
run waiting on its next tool holds none. Without the pool (SQLite, ``RUNLEDGER_DB_POOL_SIZE=0``)
``release()`` does nothing: a persistent connection is kept, as before.

Code that runs ledger writes on threads of its own (fan-out siblings, the batch flusher, an
async agent's writes handed to a thread) wraps each piece of work in ``step_connection()``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

#: Pools and connections inherited through a fork: kept referenced, never used or closed (their
#: sockets are the parent's; closing them would end the parent's sessions).
_inherited: list[Any] = []


def pooled(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """True when ``alias``'s connections come from a pool (PostgreSQL with the pool on)."""
    options = connections.settings[alias].get("OPTIONS") or {}
    return bool(options.get("pool"))


def release(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Give this thread's connection back to its pool, unless a transaction is open on it (the
    outer ``atomic`` gives it back when it ends) or there is no pool (then keep it)."""
    if not pooled(alias):
        return
    conn = connections[alias]
    if conn.connection is None or conn.in_atomic_block:
        return
    conn.close()


def close_pool(alias: str = DEFAULT_DB_ALIAS) -> None:
    """Close ``alias``'s connection and its pool with every connection the pool keeps (the next
    query opens a new pool): for a process that is done with the database, or that is pointed
    at another one. Without a pool: close the connection."""
    conn: Any = connections[alias]
    conn.close()
    if pooled(alias):
        conn.close_pool()


@contextlib.contextmanager
def step_connection(alias: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """Around one step's ledger work (or any piece of it on a thread): whatever connection the
    block took from the pool is back in it when the block ends, however it ends."""
    try:
        yield
    finally:
        release(alias)


def unreachable(alias: str = DEFAULT_DB_ALIAS, *, timeout: int = 10) -> str:
    """Why ``alias``'s database does not answer, in the driver's words; "" when it does.

    One connection made directly, not through the pool, and closed at once: a pool retries a
    refused connection in the background until ``RUNLEDGER_DB_POOL_TIMEOUT_SECONDS`` and then
    says only that it could not get one, so a command or a process starting against a server
    that is down would wait 30 s for a useless line. Without a pool: "" (the first query says).
    """
    if not pooled(alias):
        return ""
    from django.db import DatabaseError

    db: Any = connections[alias]  # a PostgreSQL wrapper: pooled() said so
    params = db.get_connection_params()
    params.setdefault("connect_timeout", timeout)
    try:
        with db.wrap_database_errors:
            db.Database.connect(**params).close()
    except DatabaseError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _forget_inherited_pools() -> None:
    """In a forked child (Celery's prefork pool processes, a preloading web server): the
    parent's pools and their connections are not this process's. Forget them without closing
    them, so that this process opens a pool of its own at its first query."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    pools: dict[str, Any] = getattr(DatabaseWrapper, "_connection_pools", {})  # one per alias
    if pools:
        _inherited.append(dict(pools))
        pools.clear()
    for conn in connections.all(initialized_only=True):
        if pooled(conn.alias) and conn.connection is not None:
            _inherited.append(conn.connection)
            conn.connection = None


def install_fork_guard() -> None:
    """Once per process (``LedgerConfig.ready``)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_inherited_pools)
