"""Fields every log record carries while they are bound: run_id, step_id, worker, lease, actor.

The worker binds the run, its own name and the lease token's first eight characters for the
length of an execution (``ledger.processes.execute.run_execute``); the web binds the signed-in
person as
``actor`` for the length of a request. A logging filter (``runs.operations.logs.LedgerContext``)
copies
them onto each record, so a JSON log line says which run, worker and lease wrote it without
every ``log.info`` naming them. Context variables: a thread started inside (the fan-out pool)
starts with none bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token

_fields: ContextVar[Mapping[str, str]] = ContextVar("runledger_log_fields", default={})  # noqa: B039


@contextmanager
def bound(**fields: str) -> Iterator[None]:
    """Bind ``fields`` (added to those already bound) until the block ends."""
    token = _fields.set({**_fields.get(), **fields})
    try:
        yield
    finally:
        _fields.reset(token)


def bind(**fields: str) -> Token[Mapping[str, str]]:
    """Bind ``fields`` until ``unbind(token)``: for a start and an end in two callbacks (Celery's
    task_prerun and task_postrun), where a ``with`` block cannot span them."""
    return _fields.set({**_fields.get(), **fields})


def unbind(token: Token[Mapping[str, str]]) -> None:
    _fields.reset(token)


def current() -> Mapping[str, str]:
    return _fields.get()


def lease_prefix(token: str | None) -> str:
    """Enough of a lease token to tell two leases apart in a log, not enough to use it."""
    return (token or "")[:8]
