"""The sign-in hardening, through Django's test client: a lock after wrong passwords, signed-in
pages that are not stored and carry a Content-Security-Policy, and the password validators in
``createroleuser`` and the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "a long enough passphrase"


def _sign_in(client: Client, password: str) -> int:
    response = client.post("/accounts/login/", {"username": "pat", "password": password})
    return response.status_code


def test_wrong_passwords_lock_the_sign_in_and_axes_reset_unlocks_it(settings) -> None:
    User.objects.create_user(username="pat", password=PASSWORD)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "wrong") == 200  # the form again, with its error
    assert _sign_in(client, "wrong") == 429
    locked = client.post("/accounts/login/", {"username": "pat", "password": PASSWORD})
    assert locked.status_code == 429
    assert b"Signing in is locked" in locked.content
    assert "_auth_user_id" not in client.session

    call_command("axes_reset_username", "pat")
    assert _sign_in(client, PASSWORD) == 302
    assert client.session["_auth_user_id"] == str(User.objects.get(username="pat").pk)


def test_signed_in_pages_are_not_stored_and_carry_a_content_security_policy() -> None:
    user = User.objects.create_user(
        username="pat", password=PASSWORD, is_superuser=True, is_staff=True
    )
    client = Client()
    client.force_login(user)
    for path in ("/", "/audit/", "/admin/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"], path
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, path


@pytest.mark.parametrize("weak", ["a", "password123", "12345678901234", "1qaz2wsx3edc"])
def test_createroleuser_refuses_a_weak_password(weak, tmp_path) -> None:
    secret = tmp_path / "password"
    secret.write_text(weak + "\n")
    with pytest.raises(CommandError, match="password refused"):
        call_command("createroleuser", "weakpw", "--role", "admin", "--password-file", str(secret))
    assert not User.objects.filter(username="weakpw").exists()


def test_the_admin_applies_the_password_validators() -> None:
    admin = User.objects.create_user(username="root", password=PASSWORD, is_superuser=True)
    admin.is_staff = True
    admin.save()
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/auth/user/add/",
        {"username": "newbie", "password1": "a", "password2": "a", "usable_password": "true"},
    )
    assert response.status_code == 200
    assert b"This password is too short" in response.content
    assert not User.objects.filter(username="newbie").exists()
