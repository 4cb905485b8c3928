"""The dashboard's permissions, held by a model without a table.

Roles are groups (created by migration 0002): ``viewer`` reads, ``operator`` acts on runs,
``approver`` approves hand settlements; superusers are admins. Views check these permissions on
the server, never by hiding buttons alone.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

VIEW_DASHBOARD = "runs.view_dashboard"
EXPORT_LEDGER = "runs.export_ledger"
OPERATE_RUNS = "runs.operate_runs"
APPROVE_SETTLEMENTS = "runs.approve_settlements"

#: Each role's permissions (codenames in the ``runs`` app). Admins are superusers.
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "viewer": ("view_dashboard",),
    "operator": ("view_dashboard", "export_ledger", "operate_runs"),
    "approver": ("view_dashboard", "export_ledger", "approve_settlements"),
}
ROLES = (*ROLE_PERMISSIONS, "admin")


class Dashboard(models.Model):
    """Holds the dashboard's permissions; it has no table and no rows."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can read runs, ledgers and resume previews"),
            ("export_ledger", "Can view and download a run's whole ledger as JSON"),
            ("operate_runs", "Can resume, cancel and fork runs and propose settlements"),
            ("approve_settlements", "Can approve a settlement proposed by someone else"),
        ]

    def __str__(self) -> str:
        return "dashboard permissions"


class Preference(models.Model):
    """One person's dashboard settings: the time zone every time is shown in (UTC by default,
    an IANA name such as ``Europe/Paris``; ``runs.dashboard.zones`` checks it)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dashboard_preference"
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.user_id}: {self.time_zone}"


class TeamRole(models.Model):
    """A person's role in one team (``runs.dashboard.teams``): they see that team's runs and act
    on them as ``role`` allows, and nothing of other teams. A person's role groups (and
    superuser) hold in every team; a team role adds to them, it never takes away."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_roles"
    )
    team = models.CharField(max_length=63)
    role = models.CharField(max_length=20, choices=[(r, r) for r in ROLE_PERMISSIONS])
    #: Where it came from: "" set by hand (admin, ``createroleuser --team``), "sso" from the
    #: identity provider's groups at the person's last sign-in (replaced at each sign-in).
    source = models.CharField(max_length=10, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="dashboard_teamrole_one_per_team")
        ]
        ordering = ["team", "user_id"]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.team}: {self.role}"


class SsoIdentity(models.Model):
    """The person an identity provider's account is (``runs.dashboard.sso``): matched by the
    provider's ``issuer`` and the account's ``sub``, which the provider never gives another
    account — never by e-mail or user name, which it may re-assign."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField()
    #: The last sign-in through the provider (when the roles were last replaced).
    signed_in_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="dashboard_sso_one_person")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}: {self.user_id}"
