"""Who calls: a bearer token (``runs.api.tokens``), its role, its rate, and the body limit.

``TokenAuth`` runs before django-ninja reads the body, so an oversized body (413) and a missing,
wrong or revoked token (401) are refused before anything is parsed. ``TokenThrottle`` is
django-ninja's own per-auth rate limit, with the rate read from the settings at each request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.throttling import AuthRateThrottle

from ledger.transitions import Actor
from runs.api import problems, tokens
from runs.api.models import ApiToken
from runs.dashboard.roles import role_of
from runs.dashboard.teams import team_of


class TokenAuth(HttpBearer):
    def __call__(self, request: HttpRequest) -> Any:
        limit = settings.RUNLEDGER_API_MAX_BODY_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            raise problems.too_large(limit)
        header = request.headers.get("Authorization", "")
        scheme, _, secret = header.partition(" ")
        if not header:
            if any(name.lower() in _QUERY_TOKENS for name in request.GET):
                raise problems.unauthorized(
                    "a token in the query string is never accepted (URLs are logged and "
                    "kept by proxies and browsers): send it as 'Authorization: Bearer <token>'"
                )
            raise problems.unauthorized()
        if scheme.lower() != "bearer" or not secret.strip():
            raise problems.unauthorized("the Authorization header must be 'Bearer <token>'")
        return self.authenticate(request, secret.strip())

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken:
        found = tokens.token_for(token)
        if found is None:
            raise problems.unauthorized("this token is not valid (unknown or revoked)")
        return found


#: Query parameters a client might put a token in: refused with a word on where it belongs.
_QUERY_TOKENS = frozenset({"access_token", "token", "api_key", "apikey", "bearer"})


class TokenThrottle(AuthRateThrottle):
    """At most ``RUNLEDGER_API_RATE`` requests per token (django-ninja's throttle, keyed by the
    token's name)."""

    def __init__(self) -> None:
        super().__init__(settings.RUNLEDGER_API_RATE)

    def allow_request(self, request: HttpRequest) -> bool:
        rate = settings.RUNLEDGER_API_RATE
        if rate != self.rate:
            self.rate = rate
            self.num_requests, self.duration = self.parse_rate(rate)
        return super().allow_request(request)


def token_of(request: HttpRequest) -> ApiToken:
    token: ApiToken = request.auth  # type: ignore[attr-defined]
    return token


def require(request: HttpRequest, action: str) -> ApiToken:
    """The request's token when its role may do ``action``; a 403 problem otherwise."""
    token = token_of(request)
    words = _WORDS.get(action, action)
    if not token.role_allows(action):
        raise problems.forbidden(f"a {token.role} token may not {words}")
    if not token.person_allows(action):
        person = token.user
        assert person is not None
        raise problems.forbidden(
            f"this {token.role} token acts for {person.get_username()}, who is now "
            f"{role_of(person) or 'in no role'} and may not {words}: a token never acts beyond "
            "its person's role of the moment"
        )
    if token.teams_for(action) == frozenset():
        person = token.user
        assert person is not None and token.team
        raise problems.forbidden(
            f"this token is team {token.team}'s and acts for {person.get_username()}, who may "
            f"not {words} in {token.team} now: a token never acts beyond its person's role of "
            "the moment"
        )
    return token


def reach(request: HttpRequest, action: str = "read") -> frozenset[str] | None:
    """The teams whose runs the request's token may ``action`` (None: every team): what every
    list, count and search of the API is narrowed to (``runs.dashboard.teams.scope_runs``)."""
    return token_of(request).teams_for(action)


def check_reach(request: HttpRequest, obj: Any, action: str, missing: str) -> None:
    """The one check of an object (a run, a row of a run, a team's slug) every router makes:
    **404** with ``missing`` (the same problem as for an object that does not exist) when the
    token may not read its team; 403 when it may read it but not ``action`` there."""
    token = token_of(request)
    if not token.may("read", obj):
        raise problems.not_found(missing)
    if action != "read" and not token.may(action, obj):
        raise problems.forbidden(
            f"this {token.role} token may not {_WORDS.get(action, action)} in the team "
            f"{team_of(obj)}"
            + (
                f" ({token.user.get_username()} holds no such role there now)"
                if token.user is not None
                else ""
            )
        )


def whole_reach(request: HttpRequest, action: str, what: str) -> None:
    """403 unless the token may ``action`` in every team: for what holds every team's runs
    (a pause of a tool or an agent, an agent's subscription without a team)."""
    if reach(request, action) is not None:
        raise problems.forbidden(
            f"{what} holds every team's runs: it needs a token that reaches every team (this "
            "one is limited to its team or to its person's teams)"
        )


def actor(token: ApiToken) -> Actor:
    """Who the ledger audits: the person of a person's token (so the four-eyes rule compares
    the same names as the dashboard), else ``api:<name>``."""
    return token.user if token.user is not None else f"api:{token.name}"


def require_person_approver(request: HttpRequest) -> ApiToken:
    """Approving a settlement, or deciding an approval gate, is a person's decision: an
    approver token of a person who holds the approver role now."""
    from runs.dashboard.models import APPROVE_SETTLEMENTS

    token = require(request, "approve")
    if token.user is None or not token.user.has_perm(APPROVE_SETTLEMENTS):
        raise problems.forbidden(
            "an approval needs a person's token (a user with the approver role), not a service's"
        )
    return token


_WORDS = {
    "read": "read runs",
    "start": "start runs",
    "operate": "resume, retry, cancel, pause or accept stale steps",
    "subscribe": "subscribe or remove webhooks",
    "propose": "propose settlements",
    "approve": "approve or reject (settlements, approval gates)",
}
