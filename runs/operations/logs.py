"""Log records as JSON lines (python-json-logger) carrying the ledger's bound fields.

RUNLEDGER_LOG_FORMAT=json (the default) writes one JSON object per line: ``time``, ``level``,
``logger``, ``message``, and, when bound (ledger.logcontext), ``run_id``, ``step_id``,
``worker``, ``lease`` (the lease token's first eight characters), ``actor``, and on a web
request ``request_id``, ``method``, ``path`` and ``client``; ``exc_info`` holds a traceback.
RUNLEDGER_LOG_FORMAT=plain writes ``time level logger [run_id worker] message`` for people.

The same format reaches every process's own lines: Django's (an unhandled error in a view is
logged by ``django.request`` with its traceback: LOGGING in runs/settings/observability.py),
gunicorn's error and access logs (``GunicornLogger``, named in runs/gunicorn_conf.py) and
Celery's (runs/celery.py: its handlers, its start-up banner as one record, and a task's run).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from gunicorn import glogging
from pythonjsonlogger.json import JsonFormatter

from ledger import logcontext
from runs.operations.proxies import client_address

FIELDS = (
    *("run_id", "step_id", "worker", "lease", "actor", "task_id"),
    *("request_id", "method", "path", "client"),
)
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def json_wanted() -> bool:
    """RUNLEDGER_LOG_FORMAT, read from the environment: gunicorn's arbiter configures its logger
    before Django's settings are loaded."""
    return os.environ.get("RUNLEDGER_LOG_FORMAT", "json") != "plain"


class LedgerContext(logging.Filter):
    """Copies the bound fields onto the record (as attributes, which the JSON formatter
    writes); ``context`` is the same as text for the plain format."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)  # django.request's (not written itself)
        if isinstance(request, HttpRequest) and not hasattr(record, "method"):
            record.method, record.path = request.method, request.path
        bound = logcontext.current()
        for name in FIELDS:
            if name in bound and not hasattr(record, name):
                setattr(record, name, bound[name])
        record.context = (
            " [" + " ".join(f"{k}={bound[k]}" for k in FIELDS if k in bound) + "]" if bound else ""
        )
        return True


#: An API token (``rl_`` and its secret) or a webhook signing secret, wherever it appears.
SECRET = re.compile(r"\b(rl_|whsec_)[A-Za-z0-9_\-+/=]{8,}")
#: A query parameter whose value is a credential, whatever it holds.
SECRET_PARAMETER = re.compile(
    r"(?i)(^|[?&;])((?:access_|api_|auth_|bearer_)?token|api_?key|secret|password|"
    r"authorization|auth)=([^&;#\s\"]*)"
)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` without credentials: tokens and secrets, and the values of query parameters
    named for one (``access_token=…``), replaced by ``[redacted]``."""
    if not text:
        return text
    text = SECRET_PARAMETER.sub(lambda m: f"{m[1]}{m[2]}={REDACTED}", text)
    return SECRET.sub(lambda m: m[1] + REDACTED, text)


class RedactSecrets(logging.Filter):
    """Removes credentials from a record before any handler writes it: its message (a request
    line carrying ``?access_token=rl_…``, a URL with a secret) and the request fields a line
    may carry (``query``, ``referer``, ``path``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the formatter to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        for name in ("query", "referer", "path", "request_line"):
            value = getattr(record, name, None)
            if isinstance(value, str):
                setattr(record, name, redact(value))
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object a line; a record's extra attributes are fields of it."""
    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        reserved_attrs=[*_RESERVED, "context", "request"],
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
    if not any(isinstance(f, RedactSecrets) for f in handler.filters):
        handler.addFilter(RedactSecrets())


class RequestContextMiddleware:
    """Binds a request id (the proxy's ``X-Request-ID`` when it is a sane token, else a new
    one; sent back in the response's ``X-Request-ID``), the method, path and client address on
    every log record of the request. First in MIDDLEWARE: a probe's failure has them too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get("X-Request-ID", "")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        fields = {"request_id": request_id, "method": request.method or "", "path": request.path}
        client = client_address(request.META)
        with logcontext.bound(**fields, **({"client": client} if client else {})):
            response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response


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


class GunicornLogger(glogging.Logger):
    """gunicorn's error log and access log in the project's JSON lines (RUNLEDGER_LOG_FORMAT).

    An access line is a record with the request's fields: ``method``, ``path``, ``query``,
    ``status``, ``bytes``, ``duration_ms``, ``peer`` (the connection's address: the proxy's,
    behind one), ``user_agent``, ``referer`` and the ``request_id`` the response carries.
    """

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                if not any(isinstance(f, RedactSecrets) for f in handler.filters):
                    handler.addFilter(RedactSecrets())
                if json_wanted() and getattr(handler, "_gunicorn", False):
                    handler.setFormatter(json_formatter())

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        """gunicorn's access-log atoms (the plain format) without credentials: the request
        line, the query, the referer and any header (``{authorization}i``) redacted."""
        atoms = super().atoms(resp, req, environ, request_time)
        for key in ("r", "q", "f", "U"):
            if isinstance(atoms.get(key), str):
                atoms[key] = redact(atoms[key])
        for key in list(atoms):
            if key in ("{authorization}i", "{cookie}i", "{x-api-key}i"):
                atoms[key] = REDACTED
            elif key.endswith("}i") and isinstance(atoms[key], str):
                atoms[key] = redact(atoms[key])
        return atoms

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not json_wanted():
            super().access(resp, req, environ, request_time)
            return
        if not self.access_log_enabled:
            return
        status = str(resp.status).split(None, 1)[0]
        headers = {str(k).lower(): str(v) for k, v in resp.headers}
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        self.access_log.info(
            "%s %s %s",
            method,
            path,
            status,
            extra={
                "method": method,
                "path": path,
                "query": redact(environ.get("QUERY_STRING", "")),
                "status": int(status) if status.isdigit() else status,
                "bytes": getattr(resp, "sent", None),
                "duration_ms": round(request_time.total_seconds() * 1000, 1),
                "peer": environ.get("REMOTE_ADDR", ""),
                "user_agent": environ.get("HTTP_USER_AGENT", ""),
                "referer": redact(environ.get("HTTP_REFERER", "")),
                "request_id": headers.get("x-request-id", ""),
            },
        )
