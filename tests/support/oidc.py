"""A real OpenID Connect provider on loopback for the single sign-on tests
(``tests.support.oidc_provider``: django-oauth-toolkit in a process of its own, on a free port,
with a SQLite file and an RSA key made here), and a person's side of its sign-in page driven
over HTTP for the tests that use Django's test client."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from urllib.parse import parse_qs, urljoin, urlsplit

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from runs.dashboard.role_map import parse_role_map
from runs.settings.sso import SsoConfig
from tests.support.processes import ROOT, Process, free_port, wait_for

CLIENT_ID = "runledger-test"


def _private_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@dataclass
class Provider:
    url: str  # http://127.0.0.1:PORT
    env: dict[str, str]
    process: Process
    secret: str

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def _manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "django", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def person(self, username: str, password: str, *, groups: list[str]) -> str:
        """Make or change a person at the provider, in exactly ``groups``; their ``sub``."""
        return self._manage("provider_person", username, password, "--groups", ",".join(groups))

    def client(self, *, redirects: list[str], after_logout: list[str]) -> None:
        args = [f"--redirect={r}" for r in redirects]
        args += [f"--after-logout={a}" for a in after_logout]
        self._manage("provider_client", CLIENT_ID, self.secret, *args)

    def config(self, role_map: str, **overrides: str) -> SsoConfig:
        """runledger's configuration for this provider (``settings.RUNLEDGER_SSO``)."""
        values: dict[str, object] = {
            "issuer": self.issuer,
            "client_id": CLIENT_ID,
            "client_secret": self.secret,
            "scopes": "openid profile email",
            "groups_claim": "groups",
            "username_claim": "preferred_username",
            "role_map": MappingProxyType(parse_role_map(role_map)),
            "provider_name": "Test IdP",
            "discovery_url": f"{self.issuer}/.well-known/openid-configuration",
        }
        values.update(overrides)
        return SsoConfig(**values)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.process.stop()


def start_provider(tmp: Path) -> Provider:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("RUNLEDGER_", "DJANGO_"))}
    env = {
        **keep,
        "DJANGO_SETTINGS_MODULE": "tests.support.oidc_provider.settings",
        "PYTHONPATH": str(ROOT),
        "OIDC_PROVIDER_DB": str(tmp / "provider.sqlite3"),
        "OIDC_PROVIDER_KEY": _private_key(),
        "OIDC_PROVIDER_ISSUER": f"{url}/o",
        "OIDC_PROVIDER_SECRET": secrets.token_urlsafe(30),
    }
    migrate = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v0"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stderr
    command = [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"]
    process = Process("oidc-provider", command, env, tmp)
    provider = Provider(url=url, env=env, process=process, secret=secrets.token_urlsafe(24))
    discovery = f"{provider.issuer}/.well-known/openid-configuration"
    up = wait_for(lambda: _answers(discovery), timeout=120)
    assert up, f"the provider did not answer at {discovery}:\n{process.output()}"
    return provider


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def sign_in_at_provider(authorize_url: str, username: str, password: str) -> str:
    """A person's browser at the provider: the authorization request, its sign-in form, and
    back; the URL the provider sends the browser to (runledger's callback with the code)."""
    browser = requests.Session()
    page = browser.get(authorize_url, timeout=30)  # → the provider's sign-in page
    assert page.status_code == 200, page.text
    token = browser.cookies["provider_csrftoken"]
    answer = browser.post(
        page.url,
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": token,
            "next": parse_qs(urlsplit(page.url).query)["next"][0],
        },
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text
    location = answer.headers["Location"]
    while location.startswith("/") or location.startswith(authorize_url.split("/o/")[0]):
        answer = browser.get(urljoin(page.url, location), allow_redirects=False, timeout=30)
        assert answer.status_code == 302, answer.text
        location = answer.headers["Location"]
    return location
