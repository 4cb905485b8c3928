"""Single sign-on's settings: off when nothing is set, the role map in both forms, and a wrong
value stopping the process at start-up with a message that says which and why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runs.dashboard.models import ROLES
from runs.dashboard.role_map import RANKS, Grant, parse_role_map, roles_for
from runs.settings.sso import sso_config

pytestmark = pytest.mark.sqlite_ok

ROOT = Path(__file__).resolve().parents[3]
GOOD: dict[str, Any] = {
    "issuer": "https://login.example.com/realms/ops",
    "client_id": "runledger",
    "client_secret": "s3cret",
    "secret_file": None,
    "scopes": "openid profile email",
    "groups_claim": "groups",
    "username_claim": "preferred_username",
    "role_map": '{"sre": "viewer"}',
    "provider_name": "Keycloak",
    "discovery_url": "",
}


def test_the_role_map_reads_json_and_the_compact_form_alike() -> None:
    as_json = parse_role_map(
        '{"payments-oncall": "operator@payments", "sre": "viewer", "admins": "admin",'
        ' "audit": ["viewer@payments", "approver@billing"]}'
    )
    compact = parse_role_map(
        "payments-oncall = operator@payments; sre=viewer\nadmins = admin; "
        "audit = viewer@payments; audit = approver@billing"
    )
    assert as_json == compact
    assert as_json["audit"] == (Grant("viewer", "payments"), Grant("approver", "billing"))
    assert RANKS == ROLES


def test_groups_grant_the_strongest_role_per_team_and_the_every_team_roles() -> None:
    role_map = parse_role_map(
        "a = viewer@payments; b = approver@payments; c = operator; d = viewer; e = admin"
    )
    roles = roles_for(["a", "b", "c", "d", "unknown"], role_map)
    assert roles.teams == {"payments": "approver"}
    assert roles.every_team == {"operator", "viewer"} and not roles.admin
    assert roles_for(["e"], role_map).admin
    assert not roles_for(["unknown"], role_map)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"sre": "root"}', "the role must be one of viewer, operator, approver, admin"),
        ('{"sre": "admin@payments"}', "admin holds in every team"),
        ('{"sre": "viewer@Payments!"}', "is not a team"),
        ('{"sre": 3}', "must map to a role"),
        ('{"sre": "viewer"', "not valid JSON"),
        ("sre viewer", "is not 'group = role[@team]'"),
    ],
)
def test_a_wrong_role_map_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_role_map(text)


def test_sso_is_off_without_an_issuer() -> None:
    assert sso_config(**{**GOOD, "issuer": ""}) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"issuer": "http://login.example.com"}, "must be reached over https"),
        ({"issuer": "login.example.com"}, "is not an https:// URL"),
        ({"client_id": ""}, "set RUNLEDGER_OIDC_CLIENT_ID too"),
        ({"scopes": "profile email"}, "must include openid"),
        ({"role_map": ""}, "RUNLEDGER_OIDC_ROLE_MAP is empty"),
        ({"client_secret": "", "secret_file": Path("/nonexistent/secret")}, "cannot be read"),
        ({"secret_file": Path("/nonexistent/secret")}, "not both"),
    ],
)
def test_a_wrong_sso_setting_is_refused_saying_why(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        sso_config(**{**GOOD, **change})


def test_the_secret_may_come_from_a_file_and_loopback_may_be_plain_http(tmp_path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    config = sso_config(
        **{**GOOD, "client_secret": "", "secret_file": secret, "issuer": "http://127.0.0.1:9/o"}
    )
    assert config is not None and config.client_secret == "from-a-file"
    assert config.discovery_url == "http://127.0.0.1:9/o/.well-known/openid-configuration"
    assert config.origin == "http://127.0.0.1:9"


def _check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RUNLEDGER_VAR_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_process_does_not_start_on_a_wrong_value(tmp_path) -> None:
    no_sso = _check(tmp_path, RUNLEDGER_LOCAL_LOGIN="off")
    bad_map = _check(
        tmp_path,
        RUNLEDGER_OIDC_ISSUER="https://login.example.com",
        RUNLEDGER_OIDC_CLIENT_ID="runledger",
        RUNLEDGER_OIDC_ROLE_MAP='{"sre": "superuser"}',
    )
    assert no_sso.returncode != 0
    assert "RUNLEDGER_LOCAL_LOGIN=off needs single sign-on" in no_sso.stderr
    assert bad_map.returncode != 0
    assert "group 'sre' maps to 'superuser'" in bad_map.stderr


def test_a_good_configuration_starts_and_lets_forms_lead_to_the_provider(tmp_path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "shell",
            "-c",
            "from django.conf import settings as s; "
            "print(s.RUNLEDGER_SSO.provider_name, s.RUNLEDGER_LOCAL_LOGIN, "
            "s.CONTENT_SECURITY_POLICY['DIRECTIVES']['form-action'])",
        ],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "RUNLEDGER_VAR_DIR": str(tmp_path),
            "RUNLEDGER_OIDC_ISSUER": "https://login.example.com/realms/ops",
            "RUNLEDGER_OIDC_CLIENT_ID": "runledger",
            "RUNLEDGER_OIDC_ROLE_MAP": "sre = viewer",
            "RUNLEDGER_OIDC_PROVIDER_NAME": "Keycloak",
            "RUNLEDGER_LOCAL_LOGIN": "off",
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == "Keycloak False [\"'self'\", 'https://login.example.com']"
