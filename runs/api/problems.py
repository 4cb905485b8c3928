"""Every refusal as an RFC 9457 problem document (``application/problem+json``), never a 500.

A view raises ``Problem`` (or a ledger refusal, mapped here); django-ninja's own refusals —
a body that is not JSON, fields that do not validate, a missing token, a throttled one — are
turned into problems by the exception handlers ``install`` adds to the API. Every refusal
happens before a ledger function is called or is a refusal of that function (which writes
nothing), so a refused request writes nothing.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from ninja import NinjaAPI, Schema
from ninja.errors import (
    AuthenticationError,
    AuthorizationError,
    HttpError,
    Throttled,
    ValidationError,
)

from ledger import api as ledger_api
from ledger.errors import (
    Busy,
    Conflict,
    InvalidInput,
    NotAllowed,
    NotJSON,
    PayloadTooLarge,
    SelfApproval,
    UnknownRun,
)
from ledger.inputs import queryable

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://runledger.dev/problems/"


class ProblemOut(Schema):
    """An RFC 9457 problem document. ``errors`` lists each invalid field by its path."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None
    current: dict[str, Any] | None = None


class Problem(Exception):
    def __init__(
        self,
        status: int,
        kind: str,
        title: str,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        current: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.kind, self.title, self.detail = status, kind, title, detail
        self.errors, self.current, self.headers = errors, current, headers or {}

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": TYPE_BASE + self.kind,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors is not None:
            doc["errors"] = self.errors
        if self.current is not None:
            doc["current"] = json.loads(json.dumps(self.current, default=str))
        return doc


def response(problem: Problem) -> HttpResponse:
    answer = HttpResponse(
        json.dumps(problem.document()), status=problem.status, content_type=MEDIA_TYPE
    )
    for name, value in problem.headers.items():
        answer[name] = value
    return answer


def not_found(what: str) -> Problem:
    return Problem(404, "not-found", "Not found", what)


def unauthorized(detail: str = "a valid API token is needed (Authorization: Bearer …)") -> Problem:
    return Problem(
        401, "unauthorized", "Unauthorized", detail, headers={"WWW-Authenticate": "Bearer"}
    )


def forbidden(detail: str) -> Problem:
    return Problem(403, "forbidden", "Forbidden", detail)


def too_large(limit: int) -> Problem:
    return Problem(
        413, "too-large", "Request body too large", f"the body is over {limit} bytes, the limit"
    )


def refusal(exc: Exception) -> Problem:
    """A ledger refusal (nothing was written) as a problem."""
    if isinstance(exc, ledger_api.UnknownAgent):
        return Problem(422, "unknown-agent", "Unknown agent", str(exc))
    if isinstance(exc, SelfApproval):
        return Problem(403, "self-approval", "A different person must approve", str(exc))
    if isinstance(exc, Busy):
        return busy(str(exc), retry_after=exc.retry_after)
    if isinstance(exc, Conflict):
        return Problem(409, "conflict", "Conflict", str(exc), current=exc.current)
    if isinstance(exc, NotAllowed):
        return Problem(409, "not-allowed", "Not allowed in the present state", str(exc))
    if isinstance(exc, UnknownRun):
        return not_found(str(exc))
    if isinstance(exc, PayloadTooLarge):
        return Problem(413, "too-large", "Payload too large", str(exc))
    if isinstance(exc, InvalidInput | NotJSON):
        return Problem(422, "invalid-input", "Invalid input", str(exc))
    raise exc


def busy(detail: str, *, retry_after: int = 2) -> Problem:
    """409 ``busy``: the run's row was held by another writer past the action's wait; nothing
    was written and the same request can be sent again after ``Retry-After`` seconds."""
    return Problem(
        409, "busy", "Busy: try again", detail, headers={"Retry-After": str(retry_after)}
    )


def _validation(exc: ValidationError) -> Problem:
    """Each invalid field named as the caller sent it (``reason``, ``webhooks[0].url``,
    ``status``), where (``body``, ``query``, ``path``, ``header``), and what is wrong in
    words; never the framework's locations (``body.body.…``) or union tags (``literal[…]``)."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in exc.errors:
        where, path = _field(tuple(e.get("loc", ())))
        grouped.setdefault((where, path), []).append(e)
    errors = [
        {"path": path, "in": where, "message": _message(found), "type": found[0].get("type", "")}
        for (where, path), found in grouped.items()
    ]
    text = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:10])
    return Problem(422, "validation", "Invalid request", text, errors=errors)


#: The sources django-ninja names first in an error's location.
_SOURCES = frozenset({"body", "query", "path", "header", "cookie", "form", "file"})
#: A union member's tag in pydantic's locations (``literal['a','b']``, ``function-after[…]``).
_TAG = re.compile(r"[a-z][a-z0-9_-]*\[.*\]|int|float|str|bool|none", re.DOTALL)


def _field(loc: tuple[Any, ...]) -> tuple[str, str]:
    """(where, the field's path as sent) of a django-ninja error location such as
    ``("body", "body", "webhooks", 0, "url")`` or ``("query", "q", "status", "literal[…]")``."""
    where = str(loc[0]) if loc and loc[0] in _SOURCES else "body"
    rest = [p for p in (loc[1:] if loc and loc[0] in _SOURCES else loc)
            if not (isinstance(p, str) and _TAG.fullmatch(p))]  # fmt: skip
    if len(rest) >= 2:
        rest = rest[1:]  # the view's parameter holding a schema (``body``, ``q``)
    path = ""
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return where, path or where


def _message(found: list[dict[str, Any]]) -> str:
    """One field's errors in words (a union's members' errors merged into one)."""
    if all(e.get("type") in ("literal_error", "enum") for e in found):
        choices: list[str] = []
        for e in found:
            expected = str((e.get("ctx") or {}).get("expected", ""))
            choices += [c for c in re.findall(r"'([^']*)'", expected) if c not in choices]
        return "must be one of " + ", ".join(choices)
    words: list[str] = []
    for e in found:
        kind, msg = e.get("type", ""), str(e.get("msg", ""))
        if kind == "missing":
            msg = "required"
        elif kind == "extra_forbidden":
            msg = "unknown field"
        else:
            msg = msg.replace("Input should be", "must be")
            msg = msg[:1].lower() + msg[1:]
        if msg not in words:
            words.append(msg)
    return " or ".join(words)


def _http_error(exc: HttpError) -> Problem:
    cause = exc.__cause__
    if isinstance(cause, RequestDataTooBig):
        from django.conf import settings

        return too_large(settings.RUNLEDGER_API_MAX_BODY_BYTES)
    if isinstance(cause, Unstorable):
        return unstorable(cause)
    if exc.status_code == 400 and cause is not None:
        detail = "the body is not JSON"
        if isinstance(cause, json.JSONDecodeError | ValueError):
            detail = str(cause)
        if isinstance(cause, UnicodeDecodeError):
            detail = "the body is not UTF-8 text"
        errors = None
        if isinstance(cause, json.JSONDecodeError):
            errors = [{"path": "body", "line": cause.lineno, "column": cause.colno}]
        return Problem(400, "bad-json", "The body is not valid JSON", detail, errors=errors)
    return Problem(exc.status_code, "http", "Refused", str(exc.message))


def install(api: NinjaAPI) -> None:
    """Answer every refusal of ``api`` with a problem document."""

    def handle(request: HttpRequest, exc: Any) -> HttpResponse:
        return response(_problem_for(exc))

    for kind in (Exception, Problem, HttpError, ValidationError, Http404):
        api.add_exception_handler(kind, handle)


def _problem_for(exc: Exception) -> Problem:
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, Throttled):
        wait = getattr(exc, "wait", None)
        headers = {"Retry-After": str(max(1, round(wait)))} if wait else {}
        return Problem(
            429,
            "too-many-requests",
            "Too many requests",
            "this token sent more requests than its rate allows; retry after the pause",
            headers=headers,
        )
    if isinstance(exc, AuthenticationError):
        return unauthorized()
    if isinstance(exc, AuthorizationError):
        return forbidden(str(exc.message))
    if isinstance(exc, ValidationError):
        return _validation(exc)
    if isinstance(exc, HttpError):
        return _http_error(exc)
    if isinstance(exc, Http404):
        return not_found(str(exc) or "no such resource")
    if isinstance(exc, RequestDataTooBig):
        from django.conf import settings

        return too_large(settings.RUNLEDGER_API_MAX_BODY_BYTES)
    if isinstance(
        exc, ledger_api.UnknownAgent | Busy | Conflict | NotAllowed | InvalidInput | NotJSON
    ):
        return refusal(exc)
    if isinstance(exc, DatabaseError) and _sqlstate(exc) in LOCK_WAITS:
        log.warning("API: a lock wait refused (%s): answered busy", _sqlstate(exc))
        return busy("the run is busy (another writer holds its rows); nothing was changed — "
                    "try again in a few seconds")  # fmt: skip
    if isinstance(exc, DatabaseError):
        log.exception("API: the database failed")
        return Problem(
            503,
            "unavailable",
            "The ledger is unavailable",
            "the database did not answer; retry later",
            headers={"Retry-After": "5"},
        )
    log.exception("API: unexpected error")
    return Problem(500, "internal", "Internal error", "an unexpected error; it was logged")


class ApiEdge:
    """What every request under the API's prefix meets before (and after) routing:

    - text PostgreSQL cannot hold — a NUL, a lone surrogate — in the path, a query parameter
      or a header is a 422 problem (the body's is refused by the API's parser, ``Unstorable``);
    - Django's own 404 page (a path no route matches) and django-ninja's 405 (a method the path
      does not take) become problem documents, a 405 keeping its ``Allow`` header.
    """

    PREFIX = "/api/v1/"

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not request.path_info.startswith(self.PREFIX):
            return self.get_response(request)
        bad = _unstorable_in_request(request)
        if bad is not None:
            return response(bad)
        answer = self.get_response(request)
        if answer.status_code not in (404, 405):
            return answer
        if answer.get("Content-Type", "").startswith(MEDIA_TYPE):
            return answer
        if answer.status_code == 404:
            return response(not_found(f"no such resource: {request.path_info}"))
        allowed = answer.get("Allow", "")
        refused = Problem(
            405,
            "method-not-allowed",
            "Method not allowed",
            f"{request.method} is not a method of {request.path_info} (allowed: {allowed})",
            headers={"Allow": allowed},
        )
        return response(refused)


class Unstorable(ValueError):
    """Text the database cannot hold (a NUL, a lone surrogate) at ``path`` of ``where``."""

    def __init__(self, path: str, where: str = "body") -> None:
        super().__init__(f"{path}: {UNSTORABLE}")
        self.path, self.where = path, where


UNSTORABLE = "text may not hold a NUL character or a lone surrogate (the ledger cannot store it)"


def unstorable_json(value: Any, path: str = "") -> None:
    """Raise ``Unstorable`` naming the first string (a value or a key) of parsed JSON that the
    database cannot hold."""
    if isinstance(value, str):
        if not queryable(value):
            raise Unstorable(path or "body")
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if not queryable(str(key)):
                raise Unstorable(f"{path}.<key>" if path else "<key>")
            unstorable_json(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            unstorable_json(item, f"{path}[{i}]")


def unstorable(exc: Unstorable) -> Problem:
    errors = [{"path": exc.path, "in": exc.where, "message": UNSTORABLE, "type": "unstorable"}]
    return Problem(422, "invalid-input", "Invalid input", str(exc), errors=errors)


def _unstorable_in_request(request: HttpRequest) -> Problem | None:
    if not queryable(request.path_info):
        return unstorable(Unstorable("path", "path"))
    for key, values in request.GET.lists():
        if not queryable(key) or not all(queryable(v) for v in values):
            return unstorable(Unstorable(key if queryable(key) else "<parameter>", "query"))
    for name, value in request.headers.items():
        if not queryable(value):
            return unstorable(Unstorable(name, "header"))
    return None


#: A lock wait past ``lock_timeout`` (55P03) and a deadlock PostgreSQL broke (40P01): the
#: transaction was rolled back whole, so the request can simply be sent again.
LOCK_WAITS = frozenset({"55P03", "40P01"})


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)
