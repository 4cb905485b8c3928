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
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Schema
from ninja.errors import (
    AuthenticationError,
    AuthorizationError,
    HttpError,
    Throttled,
    ValidationError,
)

from ledger import api as ledger_api
from ledger.errors import Busy, Conflict, InvalidInput, NotAllowed, NotJSON, SelfApproval

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
    errors = [
        {
            "path": ".".join(str(p) for p in e.get("loc", ())),
            "message": e.get("msg", ""),
            "type": e.get("type", ""),
        }
        for e in exc.errors
    ]
    text = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:10])
    return Problem(422, "validation", "Invalid request", text, errors=errors)


def _http_error(exc: HttpError) -> Problem:
    cause = exc.__cause__
    if isinstance(cause, RequestDataTooBig):
        from django.conf import settings

        return too_large(settings.RUNLEDGER_API_MAX_BODY_BYTES)
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


#: A lock wait past ``lock_timeout`` (55P03) and a deadlock PostgreSQL broke (40P01): the
#: transaction was rolled back whole, so the request can simply be sent again.
LOCK_WAITS = frozenset({"55P03", "40P01"})


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc.__cause__, "sqlstate", None)
