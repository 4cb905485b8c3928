"""Managing team roles (issue 35, teams): ``createroleuser --team``, the admin's inline on a
user's page (admins only), each change audited as ``team_role``; the admin's ledger pages are
scoped for a staff member who is not a superuser; the header names every role and where."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from ledger.models import AuditAction, AuditEvent, Run
from runs.dashboard.models import OPERATE_RUNS, VIEW_DASHBOARD, TeamRole
from runs.dashboard.teams import teams_for
from tests.support.dashboard_runs import client_for, restore_roles, succeeded_run, user_in

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _roles() -> None:
    restore_roles()


def test_createroleuser_team_gives_a_role_in_that_team_only_and_audits_it(tmp_path) -> None:
    secret = tmp_path / "password"
    secret.write_text("pw-long-enough\n")
    call_command(
        "createroleuser", "pat", "--role", "operator", "--team", "payments",
        "--password-file", str(secret),
    )  # fmt: skip
    pat = User.objects.get(username="pat")
    assert teams_for(pat, OPERATE_RUNS) == {"payments"}
    assert not pat.groups.exists() and not pat.is_superuser
    assert pat.has_perm(OPERATE_RUNS, "payments") and not pat.has_perm(OPERATE_RUNS, "search")
    event = AuditEvent.objects.get(action=AuditAction.TEAM_ROLE)
    assert event.before is None
    assert event.after == {"user": "pat", "team": "payments", "role": "operator"}
    # Again with another role: changed, audited again; the same again: nothing new.
    call_command("createroleuser", "pat", "--role", "viewer", "--team", "payments")
    call_command("createroleuser", "pat", "--role", "viewer", "--team", "payments")
    assert list(TeamRole.objects.values_list("team", "role")) == [("payments", "viewer")]
    assert AuditEvent.objects.filter(action=AuditAction.TEAM_ROLE).count() == 2
    with pytest.raises(CommandError, match="every team"):
        call_command("createroleuser", "pat", "--role", "admin", "--team", "payments")
    with pytest.raises(CommandError, match="team"):
        call_command("createroleuser", "pat", "--role", "viewer", "--team", "Not A Team")


def _inline_post(user: User, rows: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "username": user.username,
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "team_roles-TOTAL_FORMS": str(len(rows)),
        "team_roles-INITIAL_FORMS": str(sum(1 for r in rows if r.get("id"))),
        "team_roles-MIN_NUM_FORMS": "0",
        "team_roles-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        for key, value in row.items():
            data[f"team_roles-{i}-{key}"] = value
        data[f"team_roles-{i}-user"] = str(user.pk)
    return data


def test_the_admin_changes_team_roles_inline_and_each_change_is_audited() -> None:
    root = User.objects.create_superuser(username="root", password=None)
    pat = User.objects.create_user(username="pat", password=None)
    admin = client_for(root)
    page = admin.get(f"/admin/auth/user/{pat.pk}/change/")
    assert page.status_code == 200 and "oles in teams" in page.content.decode()
    added = admin.post(
        f"/admin/auth/user/{pat.pk}/change/",
        _inline_post(pat, [{"team": "payments", "role": "operator"}]),
    )
    assert added.status_code == 302, added.content.decode()[:2000]
    row = TeamRole.objects.get(user=pat)
    assert (row.team, row.role) == ("payments", "operator")
    removed = admin.post(
        f"/admin/auth/user/{pat.pk}/change/",
        _inline_post(
            pat, [{"id": str(row.pk), "team": "payments", "role": "operator", "DELETE": "on"}]
        ),
    )
    assert removed.status_code == 302
    assert not TeamRole.objects.filter(user=pat).exists()
    events = list(AuditEvent.objects.filter(action=AuditAction.TEAM_ROLE).order_by("id"))
    assert [(e.actor, e.before, e.after) for e in events] == [
        ("root", None, {"user": "pat", "team": "payments", "role": "operator"}),
        ("root", {"user": "pat", "team": "payments", "role": "operator"}, None),
    ]
    refused = admin.post(
        f"/admin/auth/user/{pat.pk}/change/",
        _inline_post(pat, [{"team": "Bad Team!", "role": "operator"}]),
    )
    assert refused.status_code == 200 and not TeamRole.objects.filter(user=pat).exists()


def test_staff_who_are_not_superusers_see_the_ledger_rows_of_their_teams_only(
    execute, settings
) -> None:
    settings.RUNLEDGER_DEFAULT_TEAM = "alpha"
    mine = succeeded_run(execute, invoice="inv_1001")
    settings.RUNLEDGER_DEFAULT_TEAM = "beta"
    theirs = succeeded_run(execute, invoice="inv_1003")
    staff = User.objects.create_user(username="stan", password=None, is_staff=True)
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="ledger", codename__startswith="view_")
    )
    TeamRole.objects.create(user=staff, team="alpha", role="viewer")
    client: Client = client_for(staff)
    listing = client.get("/admin/ledger/run/").content.decode()
    assert mine.run_id in listing and theirs.run_id not in listing
    assert client.get(f"/admin/ledger/run/{mine.run_id}/change/").status_code == 200
    steps = client.get("/admin/ledger/step/").content.decode()
    assert mine.run_id in steps and theirs.run_id not in steps
    other = client.get(f"/admin/ledger/run/{theirs.run_id}/change/")
    assert other.status_code == 302  # the admin's "does not exist" answer: back to the list
    root = client_for(User.objects.create_superuser(username="root", password=None))
    everything = root.get("/admin/ledger/run/").content.decode()
    assert mine.run_id in everything and theirs.run_id in everything
    assert Run.objects.count() == 2


def test_the_header_names_each_role_and_its_team() -> None:
    pat = User.objects.create_user(username="pat", password=None)
    TeamRole.objects.create(user=pat, team="payments", role="operator")
    TeamRole.objects.create(user=pat, team="search", role="viewer")
    html = client_for(User.objects.get(pk=pat.pk)).get("/").content.decode()
    assert "operator in payments, viewer in search" in html
    vic = user_in("viewer", name="vic")
    TeamRole.objects.create(user=vic, team="payments", role="operator")
    html = client_for(User.objects.get(pk=vic.pk)).get("/").content.decode()
    assert "viewer, operator in payments" in html
    assert teams_for(User.objects.get(pk=vic.pk), VIEW_DASHBOARD) is None
