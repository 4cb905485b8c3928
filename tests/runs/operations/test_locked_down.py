"""Locked down by default, behind a proxy (finding 5 of issue 24): /metrics needs its token, an
allow-list is an opt-in that names the proxy and honours X-Forwarded-For only from it, sign-in
lock-outs count by the real client, the admin can be moved or turned off, check --deploy wants
SECRET_KEY, createroleuser keeps passwords off the command line, archives are private."""

from __future__ import annotations

import importlib
import os
import stat
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import clear_url_caches
from django.utils import timezone

from ledger import transitions
from ledger.processes import retention
from runs.operations.proxies import parse_networks
from tests.support.dashboard_runs import restore_roles
from tests.support.processes import deployment_env, manage

pytestmark = pytest.mark.django_db
PASSWORD = "a long enough passphrase"


def test_metrics_answers_no_one_without_its_token_by_default(settings) -> None:
    assert settings.RUNLEDGER_METRICS_NETWORKS == [] and settings.RUNLEDGER_METRICS_TOKEN == ""
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403
    settings.RUNLEDGER_METRICS_TOKEN = "tok-9"
    scraper = Client(REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer tok-9")
    assert scraper.get("/metrics").status_code == 200


def test_an_allow_list_behind_a_named_proxy_judges_the_forwarded_client(settings) -> None:
    """The issue's case: behind a local proxy every client is 127.0.0.1."""
    settings.RUNLEDGER_METRICS_NETWORKS = parse_networks(["127.0.0.0/8", "10.9.0.0/16"], name="n")
    settings.RUNLEDGER_TRUSTED_PROXIES = parse_networks(["127.0.0.1"], name="p")
    settings.RUNLEDGER_PROXY_NAMED = True
    via_proxy = Client(REMOTE_ADDR="127.0.0.1")
    assert via_proxy.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.5").status_code == 403
    # A client cannot smuggle an allowed address in front of its own: the proxy appends.
    spoofed = via_proxy.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.0.1, 203.0.113.5")
    assert spoofed.status_code == 403
    assert via_proxy.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.1.2").status_code == 200
    assert via_proxy.get("/metrics").status_code == 200  # Prometheus on the machine, direct
    # From anyone but the proxy the header is ignored.
    outsider = Client(REMOTE_ADDR="203.0.113.5")
    assert outsider.get("/metrics", HTTP_X_FORWARDED_FOR="10.9.1.2").status_code == 403


def test_an_allow_list_that_names_no_proxy_is_refused_by_the_checks(tmp_path) -> None:
    env = deployment_env(tmp_path, RUNLEDGER_METRICS_NETWORKS="10.0.0.0/8")
    refused = manage(env, "check")
    assert refused.returncode == 1 and "runledger.E003" in refused.stderr
    named = manage({**env, "RUNLEDGER_TRUSTED_PROXIES": "none"}, "check")
    assert named.returncode == 0, named.stderr


def _sign_in(client: Client, password: str, client_address: str) -> int:
    response = client.post(
        "/accounts/login/",
        {"username": "pat", "password": password},
        HTTP_X_FORWARDED_FOR=client_address,
    )
    return int(response.status_code)


def test_five_wrong_passwords_lock_out_that_client_not_the_user_everywhere(settings) -> None:
    settings.RUNLEDGER_TRUSTED_PROXIES = parse_networks(["127.0.0.1"], name="p")
    User.objects.create_user(username="pat", password=PASSWORD)
    proxy = Client(REMOTE_ADDR="127.0.0.1")  # every request arrives through the local proxy
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(proxy, "wrong", "198.51.100.7")
    assert _sign_in(proxy, PASSWORD, "198.51.100.7") == 429  # the guesser is locked out
    assert _sign_in(Client(REMOTE_ADDR="127.0.0.1"), PASSWORD, "198.51.100.8") == 302  # pat is not


@pytest.fixture
def admin_at() -> Iterator[object]:
    """Mount the URLs again after RUNLEDGER_ADMIN_URL changes (they are read at import)."""
    import runs.urls

    def remount() -> None:
        importlib.reload(runs.urls)
        clear_url_caches()

    yield remount
    from django.conf import settings

    settings.RUNLEDGER_ADMIN_URL = "admin/"
    remount()


def test_the_admin_can_be_moved_or_turned_off(settings, admin_at) -> None:
    root = User.objects.create_user(
        username="root", password=PASSWORD, is_superuser=True, is_staff=True
    )
    client = Client()
    client.force_login(root)
    assert client.get("/admin/").status_code == 200

    settings.RUNLEDGER_ADMIN_URL = "ops-7f3a/"
    admin_at()
    assert client.get("/ops-7f3a/").status_code == 200
    assert client.get("/admin/").status_code == 404

    settings.RUNLEDGER_ADMIN_URL = ""
    admin_at()
    assert client.get("/admin/").status_code == 404
    page = client.get("/")
    assert page.status_code == 200 and b">Admin</a>" not in page.content


def test_check_deploy_errs_when_secret_key_is_not_set(tmp_path) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "RUNLEDGER_VAR_DIR": str(tmp_path)}
    done = manage({**env, "ALLOWED_HOSTS": "runledger.example.com"}, "check", "--deploy")
    assert done.returncode == 1
    assert "runledger.E002" in done.stderr and "SECRET_KEY is not set" in done.stderr
    assert stat.S_IMODE((tmp_path / "secret_key").stat().st_mode) == 0o600


def test_createroleuser_reads_the_password_from_a_file_or_a_prompt(tmp_path, monkeypatch) -> None:
    restore_roles()  # an earlier transactional test in this process may have flushed them
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    call_command("createroleuser", "ann", "--role", "viewer", "--password-file", str(secret))
    assert User.objects.get(username="ann").check_password(PASSWORD)

    answers = iter(["another long passphrase", "another long passphrase"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    call_command("createroleuser", "bo", "--role", "operator", "--prompt")
    assert User.objects.get(username="bo").check_password("another long passphrase")


def test_createroleuser_refuses_a_missing_file_or_differing_answers_and_writes_nothing(
    tmp_path, monkeypatch
) -> None:
    with pytest.raises(CommandError, match="cannot read the password file"):
        call_command("createroleuser", "cy", "--role", "viewer", "--password-file", "/nonexistent")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(CommandError, match="no password on its first line"):
        call_command(
            "createroleuser", "cy", "--role", "viewer", "--password-file", str(tmp_path / "empty")
        )
    answers = iter(["one long passphrase", "another passphrase"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    with pytest.raises(CommandError, match="differ"):
        call_command("createroleuser", "cy", "--role", "viewer", "--prompt")
    assert not User.objects.filter(username="cy").exists()


def test_createroleuser_password_argument_still_works_deprecated() -> None:
    restore_roles()
    with pytest.warns(DeprecationWarning, match="--password is deprecated"):
        call_command("createroleuser", "di", "--role", "viewer", "--password", PASSWORD)
    assert User.objects.get(username="di").check_password(PASSWORD)


@pytest.mark.django_db(transaction=True)
def test_archives_are_readable_by_the_service_user_only(execute, clock, tmp_path) -> None:
    clock.now = timezone.now() - timedelta(days=40)
    run = transitions.run_start(agent="survey", inputs={"records": 2}, clock=clock)
    assert execute(run.run_id).status == "succeeded"
    directory = tmp_path / "archives"
    done = retention.prune_finished(
        finished_before=timezone.now() - timedelta(days=30),
        store=retention.DirectoryStorage(location=directory),
        by="test",
    )
    assert done.runs == 1
    (archive,) = directory.rglob("*.jsonl.gz")
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert stat.S_IMODE(archive.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_the_var_directory_is_private(tmp_path) -> None:
    var = tmp_path / "var"
    done = manage({**deployment_env(tmp_path), "RUNLEDGER_VAR_DIR": str(var)}, "check")
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
