"""Making, finding and revoking service tokens (the commands, the admin and the API use these)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from ledger.teams import is_team
from runs.api.models import ROLES, ApiToken
from runs.dashboard.models import APPROVE_SETTLEMENTS, VIEW_DASHBOARD
from runs.dashboard.teams import may

PREFIX = "rl_"
#: last_used_at is written at most this often per token (not on every request).
LAST_USED_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # shown once, never stored


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_create(*, name: str, role: str, user: User | None = None, team: str = "") -> NewToken:
    """A new token; ``ValueError`` for a taken name, an unknown role, an approver token that
    is not a person's who holds the approver role, a ``team`` that is not a team's slug, or a
    person's token bound to a team where the person holds no role (``team``: the token sees
    and acts on that team's runs only; "" every team its role, or its person, reaches)."""
    name = name.strip()
    if not name or len(name) > 100 or not name.isprintable() or " " in name:
        raise ValueError("a token's name is 1 to 100 printable characters without spaces")
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if role == "approver" and (user is None or not user.has_perm(APPROVE_SETTLEMENTS)):
        raise ValueError(
            "an approver token acts for a person: give --user, a user with the approver role"
        )
    if team:
        if not is_team(team):
            raise ValueError(
                f"the team {team[:80]!r} is not a team: 1 to 63 characters from a-z 0-9 _ - "
                "starting with a letter or a digit"
            )
        if user is not None and not may(user, VIEW_DASHBOARD, team):
            raise ValueError(
                f"{user.get_username()} holds no role in the team {team!r}: a person's token "
                "acts no further than its person (give them a role there first)"
            )
    secret = PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        if ApiToken.objects.filter(name=name).exists():
            raise ValueError(f"a token named {name!r} exists already")
        token = ApiToken.objects.create(
            name=name,
            role=role,
            digest=digest(secret),
            prefix=secret[: len(PREFIX) + 6],
            user=user,
            team=team,
            created_at=timezone.now(),
        )
    return NewToken(token=token, secret=secret)


def token_revoke(*, name: str) -> ApiToken:
    """Revoke a token by name (``ApiToken.DoesNotExist`` if none); revoking twice is harmless."""
    token = ApiToken.objects.get(name=name)
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        token.refresh_from_db()
    return token


def token_for(secret: str) -> ApiToken | None:
    """The live token whose secret this is, its last use recorded; None otherwise."""
    if not secret.startswith(PREFIX) or len(secret) > 100:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or (token.user is not None and not token.user.is_active):
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
