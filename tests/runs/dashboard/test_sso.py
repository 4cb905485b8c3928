"""Single sign-on against a real OpenID Connect provider on loopback (django-oauth-toolkit in a
process of its own, ``tests.support.oidc``), through Django's test client: the person's groups
become roles at every sign-in, a person whose groups map to nothing is refused, PKCE and state
are checked, sign-out reaches the provider, and passwords can be switched off."""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from ledger.models import AuditEvent
from runs.dashboard.models import SsoIdentity, TeamRole
from tests.support.oidc import sign_in_at_provider

pytestmark = pytest.mark.django_db

SERVER = "http://testserver"
PASSWORD = "a long enough passphrase"
ROLE_MAP = (
    '{"payments-oncall": "operator@payments", "sre": "viewer", "platform-admins": "admin", '
    '"auditors": ["viewer@payments", "approver@billing"]}'
)


@pytest.fixture
def provider(oidc_provider: Any, settings: Any, dashboard_ready: None) -> Any:
    oidc_provider.client(
        redirects=[f"{SERVER}/accounts/sso/callback/"],
        after_logout=[f"{SERVER}/accounts/login/"],
    )
    settings.RUNLEDGER_SSO = oidc_provider.config(ROLE_MAP)
    return oidc_provider


def _to_provider(client: Client) -> str:
    start = client.get("/accounts/sso/")
    assert start.status_code == 302, start.content
    return str(start["Location"])


def _back(location: str) -> str:
    assert location.startswith(f"{SERVER}/accounts/sso/callback/?"), location
    return location.removeprefix(SERVER)


def _sign_in(client: Client, username: str) -> Any:
    """The whole round: runledger → the provider's sign-in page → runledger's callback."""
    return client.get(_back(sign_in_at_provider(_to_provider(client), username, PASSWORD)))


def _person(sub: str) -> User:
    return SsoIdentity.objects.select_related("user").get(subject=sub).user


def _team_roles(user: User) -> set[tuple[str, str, str]]:
    return set(TeamRole.objects.filter(user=user).values_list("team", "role", "source"))


def _groups(user: User) -> set[str]:
    return set(user.groups.values_list("name", flat=True))


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_a_providers_group_gives_its_role_in_that_team(provider) -> None:
    sub = provider.person("pia", PASSWORD, groups=["payments-oncall", "unrelated"])
    client = Client()
    response = _sign_in(client, "pia")

    assert response.status_code == 302 and response["Location"] == "/"
    pia = _person(sub)
    assert client.session["_auth_user_id"] == str(pia.pk)
    assert pia.username == "pia" and pia.email == "pia@example.com"
    assert not pia.has_usable_password()
    assert _team_roles(pia) == {("payments", "operator", "sso")}
    assert _groups(pia) == set() and not pia.is_superuser
    assert pia.has_perm("runs.operate_runs", "payments")
    assert not pia.has_perm("runs.view_dashboard", "billing")
    page = client.get("/")
    assert page.status_code == 200
    assert b"operator in payments" in page.content
    event = AuditEvent.objects.get(action="sso_roles", actor="pia")
    assert event.before == {"admin": False, "every_team": [], "teams": {}}
    assert event.after == {"admin": False, "every_team": [], "teams": {"payments": "operator"}}
    assert "payments-oncall" in event.reason


def test_groups_for_every_team_and_for_admin(provider) -> None:
    sub = provider.person("ada", PASSWORD, groups=["platform-admins", "sre", "auditors"])
    client = Client()
    assert _sign_in(client, "ada").status_code == 302
    ada = _person(sub)
    assert ada.is_superuser and ada.is_staff
    assert _groups(ada) == {"viewer"}
    assert _team_roles(ada) == {("payments", "viewer", "sso"), ("billing", "approver", "sso")}
    audit = client.get("/audit/?action=sso_roles")  # the change, on the Audit page
    assert audit.status_code == 200 and b"platform-admins" in audit.content


def test_a_group_removed_at_the_provider_takes_its_role_away_at_the_next_sign_in(
    provider,
) -> None:
    sub = provider.person("sam", PASSWORD, groups=["payments-oncall", "sre"])
    assert _sign_in(Client(), "sam").status_code == 302
    sam = _person(sub)
    assert _team_roles(sam) == {("payments", "operator", "sso")} and _groups(sam) == {"viewer"}
    # A role given by hand to a person who signs in through the provider lasts until then.
    TeamRole.objects.create(user=sam, team="billing", role="approver", source="")

    provider.person("sam", PASSWORD, groups=["sre"])
    client = Client()
    assert _sign_in(client, "sam").status_code == 302

    assert _signed_in(client)
    assert _team_roles(sam) == set()
    assert _groups(sam) == {"viewer"}
    assert AuditEvent.objects.filter(action="sso_roles", actor="sam").count() == 2


def test_a_person_whose_groups_map_to_nothing_is_refused_and_loses_every_role(provider) -> None:
    sub = provider.person("moe", PASSWORD, groups=["sre", "auditors"])
    assert _sign_in(Client(), "moe").status_code == 302
    provider.person("moe", PASSWORD, groups=["marketing"])

    client = Client()
    response = _sign_in(client, "moe")

    assert response.status_code == 403
    assert b"your account has no runledger role" in response.content
    assert b"<code>marketing</code>" in response.content
    assert not _signed_in(client)
    moe = _person(sub)
    assert _groups(moe) == set() and _team_roles(moe) == set() and not moe.is_superuser
    assert client.get("/").status_code == 302  # to the sign-in page


def test_people_are_matched_by_sub_never_by_a_local_account_of_the_same_name(provider) -> None:
    local = User.objects.create_user(username="lee", password=PASSWORD)
    sub = provider.person("lee", PASSWORD, groups=["sre"])
    client = Client()
    assert _sign_in(client, "lee").status_code == 302

    person = _person(sub)
    assert person.pk != local.pk and person.username == "lee+sso"
    assert client.session["_auth_user_id"] == str(person.pk)
    local.refresh_from_db()
    assert local.check_password(PASSWORD) and _groups(local) == set()
    # The same account again is the same person, whatever its name or e-mail became.
    assert _sign_in(Client(), "lee").status_code == 302
    assert SsoIdentity.objects.filter(subject=sub).count() == 1


def test_the_authorization_request_carries_a_pkce_s256_challenge(provider) -> None:
    client = Client()
    query = parse_qs(urlsplit(_to_provider(client)).query)
    state = query["state"][0]
    verifier = client.session[f"_state_runledger_{state}"]["data"]["code_verifier"]
    digest = hashlib.sha256(verifier.encode()).digest()
    assert query["code_challenge_method"] == ["S256"]
    assert query["code_challenge"] == [base64.urlsafe_b64encode(digest).rstrip(b"=").decode()]
    assert query["response_type"] == ["code"] and query["nonce"][0]


def test_a_token_exchange_with_the_wrong_verifier_is_refused_by_the_provider(provider) -> None:
    provider.person("vic", PASSWORD, groups=["sre"])
    client = Client()
    location = _to_provider(client)
    state = parse_qs(urlsplit(location).query)["state"][0]
    session = client.session
    session[f"_state_runledger_{state}"]["data"]["code_verifier"] = "x" * 64
    session.save()

    response = client.get(_back(sign_in_at_provider(location, "vic", PASSWORD)))

    assert response.status_code == 400
    assert b"invalid_grant" in response.content  # the provider's answer
    assert not _signed_in(client)
    assert not SsoIdentity.objects.exists()


def test_an_id_token_whose_signature_the_providers_keys_do_not_verify_is_refused(
    provider, settings
) -> None:
    """runledger trusts another key under the provider's key id: the real token then fails."""
    from joserfc.jwk import RSAKey

    from runs.dashboard import sso

    provider.person("kim", PASSWORD, groups=["sre"])
    relying = sso.provider(settings.RUNLEDGER_SSO)
    kid = relying.fetch_jwk_set(force=True)["keys"][0]["kid"]
    impostor = {**RSAKey.generate_key(2048).as_dict(private=False), "kid": kid, "use": "sig"}
    relying.server_metadata["jwks"] = {"keys": [impostor]}
    client = Client()
    try:
        response = _sign_in(client, "kim")
    finally:
        relying.server_metadata.pop("jwks")

    assert response.status_code == 400
    assert b"could not be verified" in response.content
    assert not _signed_in(client)
    assert not SsoIdentity.objects.exists()


def test_a_callback_whose_state_this_browser_did_not_send_is_refused(provider) -> None:
    provider.person("sue", PASSWORD, groups=["sre"])
    client = Client()
    back = _back(sign_in_at_provider(_to_provider(client), "sue", PASSWORD))
    state = parse_qs(urlsplit(back).query)["state"][0]

    forged = client.get(back.replace(f"state={state}", "state=forged"))
    elsewhere = Client().get(back)  # the right answer, in another browser

    for response in (forged, elsewhere):
        assert response.status_code == 400
        assert b"not for this browser" in response.content
    assert not _signed_in(client)
    assert not SsoIdentity.objects.exists()


def test_signing_out_ends_the_session_and_the_providers_with_the_id_token(provider) -> None:
    provider.person("oli", PASSWORD, groups=["sre"])
    client = Client()
    assert _sign_in(client, "oli").status_code == 302
    id_token = client.session["runledger_sso_id_token"]

    response = client.post("/accounts/logout/")

    assert not _signed_in(client)
    location = str(response["Location"])
    assert location.startswith(f"{provider.issuer}/logout/?")
    query = parse_qs(urlsplit(location).query)
    assert query["id_token_hint"] == [id_token]
    assert query["post_logout_redirect_uri"] == [f"{SERVER}/accounts/login/"]
    at_provider = requests.get(location, allow_redirects=False, timeout=30)
    assert at_provider.status_code == 302  # the provider took the hint and the address
    assert at_provider.headers["Location"].startswith(f"{SERVER}/accounts/login/")


def test_with_local_login_off_a_password_is_refused_everywhere(provider, settings) -> None:
    settings.RUNLEDGER_LOCAL_LOGIN = False
    User.objects.create_user(username="root", password=PASSWORD, is_superuser=True, is_staff=True)
    client = Client()

    page = client.get("/accounts/login/")
    refused = client.post("/accounts/login/", {"username": "root", "password": PASSWORD})
    admin_refused = client.post("/admin/login/", {"username": "root", "password": PASSWORD})
    admin_page = client.get("/admin/login/?next=/admin/")

    assert b"Sign in with Test IdP" in page.content and b'name="password"' not in page.content
    for response in (refused, admin_refused):
        assert response.status_code == 403
        assert b"Signing in with a password is turned off" in response.content
    assert not _signed_in(client)
    assert admin_page.status_code == 302
    assert admin_page["Location"] == "/accounts/login/?next=%2Fadmin%2F"


def test_with_local_login_on_both_ways_are_offered(provider) -> None:
    User.objects.create_user(username="pat", password=PASSWORD)
    client = Client()
    page = client.get("/accounts/login/")
    assert b"Sign in with Test IdP" in page.content and b'name="password"' in page.content
    response = client.post("/accounts/login/", {"username": "pat", "password": PASSWORD})
    assert response.status_code == 302 and _signed_in(client)


def test_without_single_sign_on_nothing_changes(settings) -> None:
    settings.RUNLEDGER_SSO = None
    client = Client()
    page = client.get("/accounts/login/")
    assert b"Sign in with" not in page.content and b'name="password"' in page.content
    assert client.get("/accounts/sso/").status_code == 404
    assert client.get("/accounts/sso/callback/?code=x&state=y").status_code == 404
