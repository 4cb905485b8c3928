from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The operator dashboard, and the permissions and roles its views check.

    Its label stays ``runs`` (the permissions are ``runs.view_dashboard`` …, the migrations
    ``runs.0001_initial`` …): what databases and group grants already hold keeps its name.
    """

    name = "runs.dashboard"
    label = "runs"
    verbose_name = "Runs dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from ledger.teams import install_admin_reader
        from runs.dashboard import teams, zones

        # The ledger's admin lists a team member's teams' rows only (runs.dashboard.teams).
        install_admin_reader(teams.admin_reader)

        # The reader's zone goes into the session at sign-in: no query per request after.
        user_logged_in.connect(zones.remember_zone, dispatch_uid="runledger-reader-zone")
