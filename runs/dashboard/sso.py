"""Single sign-on: runledger as an OpenID Connect relying party (``settings.RUNLEDGER_SSO``).

The protocol is Authlib's Django client: the authorization code flow with PKCE (S256), its
``state`` and ``nonce`` kept in the session and checked on the way back, the code exchanged at
the token endpoint, and the ID token's signature checked against the provider's JWKS (asymmetric
algorithms only) with its ``iss``, ``aud``, ``exp`` and ``nonce``. This module decides who the
person is and what they may do:

* a person is their provider account's ``sub`` under the issuer (``SsoIdentity``), never their
  e-mail or user name (a provider may give those to someone else later); a new one gets a user
  with no usable password, named from ``RUNLEDGER_OIDC_USERNAME_CLAIM``;
* at every sign-in their roles — role groups and superuser, which hold in every team, and every
  team role, whoever gave it — are replaced by what their groups map to now
  (``runs.dashboard.role_map``); a change is audited (``sso_roles``). The provider is the one
  source of an SSO person's roles: a role given by hand lasts until their next sign-in;
* a person whose groups map to nothing loses every role and is not signed in.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.contrib.auth.models import Group, User
from django.db import transaction

from ledger import transitions
from runs.dashboard import teams
from runs.dashboard.models import ROLE_PERMISSIONS, SsoIdentity, TeamRole
from runs.dashboard.role_map import Roles, roles_for
from runs.settings.sso import SsoConfig

log = logging.getLogger("runs.sso")

#: The ID token's signature: asymmetric algorithms only, whatever the provider advertises.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
SOURCE = "sso"


class SsoError(Exception):
    """The sign-in through the provider did not complete (shown to the person, logged)."""


class _Provider(DjangoOAuth2App):
    def load_server_metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = super().load_server_metadata()
        advertised = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        metadata["id_token_signing_alg_values_supported"] = [
            a for a in advertised if a in ALGORITHMS
        ] or ["RS256"]
        return metadata


_clients: dict[tuple[str, ...], _Provider] = {}
_clients_lock = threading.Lock()


def provider(config: SsoConfig) -> _Provider:
    """The Authlib client of ``config`` (one per process: it keeps the discovery document and
    the keys, and fetches the keys again when a token names one it does not know)."""
    key = (
        config.issuer,
        config.discovery_url,
        config.client_id,
        config.client_secret,
        config.scopes,
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            oauth = OAuth()
            client = oauth.register(
                "runledger",
                client_cls=_Provider,
                client_id=config.client_id,
                client_secret=config.client_secret or None,
                server_metadata_url=config.discovery_url,
                client_kwargs={
                    "scope": config.scopes,
                    "code_challenge_method": "S256",
                    "token_endpoint_auth_method": (
                        "client_secret_basic" if config.client_secret else "none"
                    ),
                    "default_timeout": 10,  # seconds, on every request to the provider
                },
            )
            _clients[key] = client
    metadata = client.load_server_metadata()
    if metadata.get("issuer") != config.issuer:
        raise SsoError(
            f"the provider's discovery document names the issuer {metadata.get('issuer')!r}, "
            f"not RUNLEDGER_OIDC_ISSUER {config.issuer!r}"
        )
    return client


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """The claim at ``path`` (dots reach into objects: ``realm_access.roles``), None if absent."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def groups_of(claims: Mapping[str, Any], path: str) -> list[str]:
    value = claim(claims, path)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []


def claims_of(client: _Provider, token: Mapping[str, Any], config: SsoConfig) -> dict[str, Any]:
    """The ID token's claims (checked), with the groups from the userinfo endpoint when the ID
    token carries none (many providers keep them there)."""
    claims = dict(token.get("userinfo") or {})
    if not claims.get("sub"):
        raise SsoError("the provider answered without an ID token")
    if claim(claims, config.groups_claim) is None:
        metadata = client.load_server_metadata()
        if metadata.get("userinfo_endpoint"):
            info = dict(client.userinfo(token=token))
            if info.get("sub") != claims["sub"]:
                raise SsoError("the userinfo endpoint answered for another subject")
            claims = {**info, **claims}
    return claims


def person_for(*, issuer: str, claims: Mapping[str, Any], config: SsoConfig, at: datetime) -> User:
    """The user of this provider account (made at its first sign-in); inside a transaction."""
    subject = str(claims["sub"])
    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is not None:
        identity.signed_in_at = at
        identity.save(update_fields=["signed_in_at"])
        user = identity.user
    else:
        user = User(username=_free_username(_wanted_username(claims, config)))
        user.set_unusable_password()
        user.save()
        SsoIdentity.objects.create(
            user=user, issuer=issuer, subject=subject, created_at=at, signed_in_at=at
        )
    _update_profile(user, claims)
    return user


def _wanted_username(claims: Mapping[str, Any], config: SsoConfig) -> str:
    for name in (config.username_claim, "email", "sub"):
        value = claim(claims, name)
        if isinstance(value, str) and value.strip():
            return re.sub(r"[^\w.@+-]", "_", value.strip())[:140]
    return "sso"


def _free_username(wanted: str) -> str:
    """``wanted``, or ``wanted+sso``, ``wanted+sso2`` …: an existing (local) account is never
    taken over by a provider account of the same name."""
    name, n = wanted, 0
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{wanted}+sso{n if n > 1 else ''}"
    return name


def _update_profile(user: User, claims: Mapping[str, Any]) -> None:
    fields = {
        "email": claim(claims, "email"),
        "first_name": claim(claims, "given_name"),
        "last_name": claim(claims, "family_name"),
    }
    changed = [
        name
        for name, value in fields.items()
        if isinstance(value, str) and getattr(user, name) != value[:150]
    ]
    for name in changed:
        setattr(user, name, str(fields[name])[:150])
    if changed:
        user.save(update_fields=changed)


def roles_held(user: User) -> Roles:
    names = set(user.groups.filter(name__in=list(ROLE_PERMISSIONS)).values_list("name", flat=True))
    return Roles(
        every_team=names,
        admin=user.is_superuser,
        teams=dict(TeamRole.objects.filter(user=user).values_list("team", "role")),
    )


def roles_replace(*, user: User, roles: Roles, reason: str, at: datetime) -> bool:
    """Make ``user`` hold exactly ``roles``; audited when they change. Inside a transaction.
    Returns whether anything changed."""
    before = roles_held(user)
    if before.as_json() == roles.as_json():
        return False
    user.is_superuser = user.is_staff = roles.admin
    user.save(update_fields=["is_superuser", "is_staff"])
    user.groups.remove(*Group.objects.filter(name__in=list(ROLE_PERMISSIONS)))
    user.groups.add(*Group.objects.filter(name__in=sorted(roles.every_team)))
    TeamRole.objects.filter(user=user).delete()
    TeamRole.objects.bulk_create(
        TeamRole(user=user, team=team, role=role, source=SOURCE)
        for team, role in sorted(roles.teams.items())
    )
    transitions.roles_replaced(
        by=user.get_username(),
        before=before.as_json(),
        after=roles.as_json(),
        reason=reason,
        at=at,
    )
    teams.forget(user)
    return True


def sign_in(
    *, claims: Mapping[str, Any], config: SsoConfig, at: datetime
) -> tuple[User, Roles, list[str]]:
    """The person these claims name, their roles replaced by what their groups grant now; and
    the roles and groups (empty roles: refuse the sign-in, they hold none now)."""
    groups = groups_of(claims, config.groups_claim)
    roles = roles_for(groups, config.role_map)
    shown = ", ".join(sorted(groups)[:20]) or "none"
    with transaction.atomic():
        user = person_for(issuer=config.issuer, claims=claims, config=config, at=at)
        roles_replace(
            user=user,
            roles=roles,
            reason=f"signed in through {config.provider_name}; groups: {shown}",
            at=at,
        )
    log.info(
        "sso sign-in",
        extra={"person": user.get_username(), "roles": roles.as_json(), "groups": groups[:20]},
    )
    return user, roles, groups
