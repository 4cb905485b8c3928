"""The Content-Security-Policy in a real browser: htmx works under it and nothing is blocked.

Chromium reports every blocked script, style or connection as a ``securitypolicyviolation``
event; the test records them from the first byte of each page and expects none while htmx
filters the list, pushes the URL and loads a run's page fragments, and expects one when an
inline script is injected (the policy is enforced, not merely sent).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.support.dashboard_runs import (
    PASSWORD,
    restore_roles,
    rewind,
    succeeded_run,
    survey_run,
    user_in,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
});
"""


def test_htmx_works_under_the_content_security_policy(page: Page, live_server, execute, clock):
    restore_roles()
    rewind(clock)
    succeeded_run(execute)
    survey = survey_run(execute, records=4)
    user_in("viewer", name="vera")
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(RECORD_VIOLATIONS)

    response = page.goto(f"{live_server.url}/accounts/login/")
    assert response is not None
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.fill("#id_username", "vera")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table tbody tr")).to_have_count(2)

    # htmx: the filter form swaps the table and pushes the URL.
    page.fill("input[name=agent]", "survey")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"agent=survey"))
    expect(page.locator("#run-table tbody tr")).to_have_count(1)
    assert page.evaluate("window.__csp") == []

    # A run page: its step table is loaded by htmx.
    page.locator(f'#run-table a[href="/runs/{survey.run_id}/"]').click()  # its title links it
    expect(page.locator("#run-header")).to_contain_text("succeeded")
    expect(page.locator("tbody[id^=step-]").first).to_be_visible()
    assert page.evaluate("window.__csp") == []
    assert not [m for m in console_errors if "Content Security Policy" in m]

    # The policy is enforced: an injected inline script does not run and is reported.
    ran = page.evaluate(
        """() => { const s = document.createElement("script");
                   s.textContent = "window.__ran = 1"; document.body.appendChild(s);
                   return window.__ran === 1; }"""
    )
    assert ran is False
    page.wait_for_function("window.__csp.length > 0")
    assert page.evaluate("window.__csp")[0].startswith("script-src")
