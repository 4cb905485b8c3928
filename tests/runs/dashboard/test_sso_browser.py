"""Single sign-on in Chromium against a real OpenID Connect provider on loopback
(``tests.support.oidc``): "Sign in with …", the provider's own sign-in page, the dashboard with
the roles the person's groups map to; then sign-out through the provider's end-session endpoint,
after which neither runledger's session nor the provider's is left."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from runs.settings.sso import with_form_action

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "a long enough passphrase"
ROLE_MAP = "payments-oncall = operator@payments; sre = viewer; platform-admins = admin"


def test_sign_in_through_the_provider_shows_the_mapped_roles_and_sign_out_ends_both(
    page: Page, live_server, oidc_provider, settings, dashboard_ready
) -> None:
    base = live_server.url
    oidc_provider.client(
        redirects=[f"{base}/accounts/sso/callback/"], after_logout=[f"{base}/accounts/login/"]
    )
    settings.RUNLEDGER_SSO = oidc_provider.config(ROLE_MAP)
    settings.RUNLEDGER_LOCAL_LOGIN = False
    # As the settings do for RUNLEDGER_OIDC_ISSUER: sign-out's form may lead to the provider.
    settings.CONTENT_SECURITY_POLICY = with_form_action(
        settings.CONTENT_SECURITY_POLICY, oidc_provider.url
    )
    oidc_provider.person("pia", PASSWORD, groups=["payments-oncall", "sre", "marketing"])
    visited: list[str] = []
    page.on("request", lambda r: visited.append(r.url) if r.is_navigation_request() else None)

    page.goto(f"{base}/")
    expect(page.locator("#sso-sign-in")).to_have_text("Sign in with Test IdP")
    expect(page.locator("input[name=password]")).to_have_count(0)
    page.click("#sso-sign-in")

    expect(page).to_have_url(re.compile(re.escape(oidc_provider.url) + "/accounts/login/"))
    page.fill("#provider-username", "pia")
    page.fill("#provider-password", PASSWORD)
    page.click("#provider-sign-in")

    expect(page).to_have_url(f"{base}/")
    who = page.locator(".who")
    expect(who).to_contain_text("pia")
    expect(who.locator(".role")).to_have_text("viewer, operator in payments")

    page.click(".who button:has-text('Sign out')")
    expect(page).to_have_url(f"{base}/accounts/login/")
    assert any(u.startswith(f"{oidc_provider.issuer}/logout/?") for u in visited), visited

    page.goto(f"{base}/")  # runledger's session is gone
    expect(page).to_have_url(re.compile(re.escape(f"{base}/accounts/login/?next=")))
    page.click("#sso-sign-in")  # and so is the provider's: it asks for the password again
    expect(page.locator("#provider-username")).to_be_visible()
