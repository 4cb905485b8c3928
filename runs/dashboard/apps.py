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
