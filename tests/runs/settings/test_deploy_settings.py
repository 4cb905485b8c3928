"""Production settings as a deployment gets them: a fresh process with only the variables set.

pytest's own process runs on plain HTTP (conftest), so these start ``manage.py`` afresh.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def manage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RUNLEDGER_VAR_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_only_a_secret_key_and_allowed_hosts(tmp_path) -> None:
    done = manage(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="runledger.example.com",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


def test_plain_http_for_development_turns_the_https_settings_off(tmp_path) -> None:
    done = manage(
        tmp_path,
        "check",
        "--deploy",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="localhost",
        RUNLEDGER_PLAIN_HTTP="1",
    )
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr + done.stdout  # HSTS, SSL redirect, both cookies


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("X-Forwarded-Proto: https", "('HTTP_X_FORWARDED_PROTO', 'https')"),
        ("", "None"),
    ],
)
def test_the_proxys_https_header_is_a_setting(tmp_path, value, expected) -> None:
    done = manage(
        tmp_path,
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SECURE_PROXY_SSL_HEADER)",
        RUNLEDGER_PROXY_SSL_HEADER=value,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == expected


def test_a_malformed_proxy_header_setting_fails_the_start_with_a_clear_error(tmp_path) -> None:
    done = manage(tmp_path, "check", RUNLEDGER_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert done.returncode != 0
    assert "RUNLEDGER_PROXY_SSL_HEADER must read 'Header-Name: value'" in done.stderr


def test_security_settings_follow_their_environment_variables(tmp_path) -> None:
    names = [
        "SECURE_SSL_REDIRECT",
        "SESSION_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SESSION_COOKIE_AGE",
        "AXES_FAILURE_LIMIT",
    ]
    code = "from django.conf import settings as s; print(" + ",".join(f"s.{n}" for n in names) + ")"
    defaults = manage(tmp_path, "shell", "-c", code)
    changed = manage(
        tmp_path,
        "shell",
        "-c",
        code,
        SECURE_SSL_REDIRECT="0",
        SESSION_COOKIE_SECURE="0",
        SECURE_HSTS_SECONDS="60",
        RUNLEDGER_SESSION_SECONDS="900",
        AXES_FAILURE_LIMIT="3",
    )
    assert defaults.stdout.splitlines()[-1].split() == ["True", "True", "31536000", "28800", "5"], (
        defaults.stderr
    )
    assert changed.stdout.splitlines()[-1].split() == ["False", "False", "60", "900", "3"], (
        changed.stderr
    )
