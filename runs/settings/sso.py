"""Single sign-on (OpenID Connect, authorization code with PKCE) and the local password sign-in.

SSO is off until ``RUNLEDGER_OIDC_ISSUER`` is set: an install that sets nothing signs in with
passwords as before. On, the sign-in page offers "Sign in with <provider>", people are matched
by the provider's ``sub`` and get the roles ``RUNLEDGER_OIDC_ROLE_MAP`` maps their groups to at
every sign-in (``runs.dashboard.sso``). ``RUNLEDGER_LOCAL_LOGIN=off`` then turns the password
form off, the admin's included. A wrong value stops the process at start-up, saying which.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from runs.dashboard.role_map import Grant, parse_role_map
from runs.settings import env, sections
from runs.settings.security import CONTENT_SECURITY_POLICY

SSO = sections.SIGN_IN


@dataclass(frozen=True)
class SsoConfig:
    """The relying party's configuration (``settings.RUNLEDGER_SSO``; None: SSO off)."""

    issuer: str
    client_id: str
    client_secret: str  # "": a public client (PKCE alone proves the code's requester)
    scopes: str
    groups_claim: str
    username_claim: str
    role_map: MappingProxyType[str, tuple[Grant, ...]]
    provider_name: str
    discovery_url: str

    @property
    def origin(self) -> str:
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(name: str, url: str) -> str:
    """``url`` when it is https (or http to this machine's loopback, for tests and a laptop)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.scheme not in ("https", "http"):
        raise ValueError(f"{name}={url!r} is not an https:// URL")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError(
            f"{name}={url!r}: the provider must be reached over https (plain http only on loopback)"
        )
    return url


def sso_config(
    *,
    issuer: str,
    client_id: str,
    client_secret: str,
    secret_file: Path | None,
    scopes: str,
    groups_claim: str,
    username_claim: str,
    role_map: str,
    provider_name: str,
    discovery_url: str,
) -> SsoConfig | None:
    """The configuration, None when SSO is off (no issuer); ValueError saying what is wrong."""
    if not issuer.strip():
        return None
    issuer = check_url("RUNLEDGER_OIDC_ISSUER", issuer.strip())
    if importlib.util.find_spec("authlib") is None:
        raise ValueError(
            "RUNLEDGER_OIDC_ISSUER is set but the SSO extra is not installed: "
            "pip install 'runledger[sso]'"
        )
    if not client_id.strip():
        raise ValueError("RUNLEDGER_OIDC_ISSUER is set: set RUNLEDGER_OIDC_CLIENT_ID too")
    if client_secret and secret_file is not None:
        raise ValueError(
            "set RUNLEDGER_OIDC_CLIENT_SECRET or RUNLEDGER_OIDC_CLIENT_SECRET_FILE, not both"
        )
    if secret_file is not None:
        client_secret = _read_secret(secret_file)
    if "openid" not in scopes.split():
        raise ValueError(f"RUNLEDGER_OIDC_SCOPES={scopes!r} must include openid")
    if not groups_claim.strip() or not username_claim.strip():
        raise ValueError("RUNLEDGER_OIDC_GROUPS_CLAIM and _USERNAME_CLAIM cannot be empty")
    parsed = parse_role_map(role_map)
    if not parsed:
        raise ValueError(
            "RUNLEDGER_OIDC_ROLE_MAP is empty: nobody could sign in through SSO (map at least "
            'one group to a role, e.g. {"runledger-admins": "admin"})'
        )
    discovery = discovery_url.strip() or (issuer.rstrip("/") + "/.well-known/openid-configuration")
    return SsoConfig(
        issuer=issuer,
        client_id=client_id.strip(),
        client_secret=client_secret,
        scopes=" ".join(scopes.split()),
        groups_claim=groups_claim.strip(),
        username_claim=username_claim.strip(),
        role_map=MappingProxyType(parsed),
        provider_name=provider_name.strip() or "single sign-on",
        discovery_url=check_url("RUNLEDGER_OIDC_DISCOVERY_URL", discovery),
    )


def _read_secret(path: Path) -> str:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(
            f"RUNLEDGER_OIDC_CLIENT_SECRET_FILE {path} cannot be read ({exc.strerror})"
        ) from None
    secret = lines[0].strip() if lines else ""
    if not secret:
        raise ValueError(f"RUNLEDGER_OIDC_CLIENT_SECRET_FILE {path} is empty")
    return secret


def with_form_action(policy: dict[str, Any], origin: str) -> dict[str, Any]:
    """``policy`` letting forms lead to ``origin`` too: signing out POSTs here and is redirected
    to the provider's end-session endpoint, which a browser checks against ``form-action``."""
    directives = dict(policy["DIRECTIVES"])
    actions = list(directives.get("form-action", ["'self'"]))
    if origin not in actions:
        actions.append(origin)
    return {**policy, "DIRECTIVES": {**directives, "form-action": actions}}


def _path_or_none(name: str, doc: str) -> Path | None:
    text = env.str(name, "", section=SSO, doc=doc)
    return Path(text) if text.strip() else None


RUNLEDGER_SSO = sso_config(
    issuer=env.str(
        "RUNLEDGER_OIDC_ISSUER",
        "",
        section=SSO,
        doc="The OpenID Connect provider's issuer (`https://login.example.com/realms/ops`); its "
        "discovery document gives the endpoints and keys. Empty: single sign-on is off. See "
        "the Single sign-on guide.",
    ),
    client_id=env.str(
        "RUNLEDGER_OIDC_CLIENT_ID", "", section=SSO, doc="runledger's client id at the provider."
    ),
    client_secret=env.str(
        "RUNLEDGER_OIDC_CLIENT_SECRET",
        "",
        section=SSO,
        doc="The client's secret (a confidential client). Empty, and no secret file: a public "
        "client, which PKCE alone protects.",
    ),
    secret_file=_path_or_none(
        "RUNLEDGER_OIDC_CLIENT_SECRET_FILE",
        "A file whose first line is the client's secret (a mounted secret), instead of "
        "`RUNLEDGER_OIDC_CLIENT_SECRET`.",
    ),
    scopes=env.str(
        "RUNLEDGER_OIDC_SCOPES",
        "openid profile email",
        section=SSO,
        doc="The scopes asked for, space-separated; must include `openid`. Add the one your "
        "provider needs for the groups claim (e.g. `groups`).",
    ),
    groups_claim=env.str(
        "RUNLEDGER_OIDC_GROUPS_CLAIM",
        "groups",
        section=SSO,
        doc="The claim (in the ID token, else from the userinfo endpoint) holding the person's "
        "groups; a dotted path reaches a nested one (`realm_access.roles`).",
    ),
    username_claim=env.str(
        "RUNLEDGER_OIDC_USERNAME_CLAIM",
        "preferred_username",
        section=SSO,
        doc="The claim a new person's runledger user name is made from (then `email`, then "
        "`sub`); people are matched by `sub`, never by this.",
    ),
    role_map=env.str(
        "RUNLEDGER_OIDC_ROLE_MAP",
        "",
        section=SSO,
        doc='The provider\'s groups as roles: JSON `{"payments-oncall": "operator@payments", '
        '"sre": "viewer", "platform-admins": "admin"}` or `group = role[@team]; ...`. A '
        "person's roles are replaced by what their groups map to at every sign-in; one whose "
        "groups map to nothing is refused.",
    ),
    provider_name=env.str(
        "RUNLEDGER_OIDC_PROVIDER_NAME",
        "single sign-on",
        section=SSO,
        doc='The provider\'s name on the sign-in button ("Sign in with Okta").',
    ),
    discovery_url=env.str(
        "RUNLEDGER_OIDC_DISCOVERY_URL",
        "",
        section=SSO,
        shown="the issuer's /.well-known/openid-configuration",
        doc="Where the provider's discovery document is, when not at the standard place.",
    ),
)

RUNLEDGER_LOCAL_LOGIN = env.bool(
    "RUNLEDGER_LOCAL_LOGIN",
    True,
    section=SSO,
    doc="Sign in with a runledger password (the sign-in form and the admin's). `off` (with "
    "single sign-on set up): only through the provider. Break-glass when the provider is down: "
    "turn it back on and sign in with an account `createroleuser` made.",
)
if not RUNLEDGER_LOCAL_LOGIN and RUNLEDGER_SSO is None:
    raise ValueError(
        "RUNLEDGER_LOCAL_LOGIN=off needs single sign-on (RUNLEDGER_OIDC_ISSUER): nobody could "
        "sign in"
    )
if RUNLEDGER_SSO is not None:
    CONTENT_SECURITY_POLICY = with_form_action(CONTENT_SECURITY_POLICY, RUNLEDGER_SSO.origin)
