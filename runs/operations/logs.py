"""Log records as JSON lines (python-json-logger) carrying the ledger's bound fields.

RUNLEDGER_LOG_FORMAT=json (the default) writes one JSON object per line: ``time``, ``level``,
``logger``, ``message``, and, when bound (ledger.logcontext), ``run_id``, ``step_id``,
``worker``, ``lease`` (the lease token's first eight characters) and ``actor``.
RUNLEDGER_LOG_FORMAT=plain writes ``time level logger [run_id worker] message`` for people.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from pythonjsonlogger.json import JsonFormatter

from ledger import logcontext

FIELDS = ("run_id", "step_id", "worker", "lease", "actor")


class LedgerContext(logging.Filter):
    """Copies the bound fields onto the record (as attributes, which the JSON formatter
    writes); ``context`` is the same as text for the plain format."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = logcontext.current()
        for name in FIELDS:
            if name in bound and not hasattr(record, name):
                setattr(record, name, bound[name])
        record.context = (
            " [" + " ".join(f"{k}={bound[k]}" for k in FIELDS if k in bound) + "]" if bound else ""
        )
        return True


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        reserved_attrs=[*_RESERVED, "context"],
    )


_RESERVED = [
    "args", "created", "exc_info", "exc_text", "filename", "funcName", "levelno", "lineno",
    "module", "msecs", "msg", "pathname", "process", "processName", "relativeCreated",
    "stack_info", "thread", "threadName", "taskName",
]  # fmt: skip


def use_json(handler: logging.Handler) -> None:
    """Make a handler someone else created (Celery's) write our JSON lines."""
    handler.setFormatter(json_formatter())
    if not any(isinstance(f, LedgerContext) for f in handler.filters):
        handler.addFilter(LedgerContext())


class ActorMiddleware:
    """Binds the signed-in person as ``actor`` on every log record of their request."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return self.get_response(request)
        with logcontext.bound(actor=user.get_username()):
            return self.get_response(request)
