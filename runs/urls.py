from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter

from runs.dashboard.views import (
    audit,
    bulk,
    deploy,
    effects,
    notifications,
    run_actions,
    run_list,
    run_page,
    settle,
    stale,
)


class RunIdConverter:
    """A run id in a URL: no slash and no NUL byte (PostgreSQL refuses NUL in a text parameter,
    so such an id reached the query and answered 500; it names no run, so it is a 404)."""

    regex = r"[^/\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RunIdConverter, "run_id")

dashboard = [
    path("", run_list.run_list, name="list"),
    path("runs/<run_id:run_id>/", run_page.run_detail, name="detail"),
    path("runs/<run_id:run_id>/header/", run_page.run_header, name="header"),
    path("runs/<run_id:run_id>/steps/", run_page.step_table, name="steps"),
    path("runs/<run_id:run_id>/steps/<int:pk>/result/", run_page.step_result, name="step_result"),
    path("runs/<run_id:run_id>/preview/", run_page.run_preview, name="preview"),
    path("runs/<run_id:run_id>/ledger.json", run_page.ledger_json, name="ledger_json"),
    # The acting side (runs/dashboard/views/): settlements, stale steps, run actions, bulk, audit.
    path("settlements/", settle.settlement_queue, name="settlements"),
    path("runs/<run_id:run_id>/steps/<int:pk>/settle/", settle.settle_page, name="settle"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/propose/",
        settle.settle_propose,
        name="settle_propose",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/lookup/",
        settle.settle_lookup,
        name="settle_lookup",
    ),
    path("settlements/<int:pk>/approve/", settle.settlement_approve, name="settlement_approve"),
    path("settlements/<int:pk>/reject/", settle.settlement_reject, name="settlement_reject"),
    path("runs/<run_id:run_id>/steps/<int:pk>/stale/", stale.stale_page, name="stale"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/accept/",
        stale.stale_accept,
        name="stale_accept",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/reexecute/",
        stale.stale_reexecute,
        name="stale_reexecute",
    ),
    path("runs/<run_id:run_id>/fork/", run_actions.run_fork, name="fork"),
    path("runs/<run_id:run_id>/clean/", run_actions.run_clean, name="clean"),
    *[
        path(f"runs/<run_id:run_id>/{a}/", run_actions.run_action, {"action": a}, name=a)
        for a in run_actions.RUN_ACTIONS
    ],
    path("bulk/", bulk.bulk_preview, name="bulk"),
    path("bulk/apply/", bulk.bulk_apply, name="bulk_apply"),
    path("audit/", audit.audit, name="audit"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("deploy/", deploy.deploy_page, name="deploy"),
    path("effects/", effects.effect_audits, name="effect_audits"),
    path("effects/run/", effects.effect_audit_run, name="effect_audit_run"),
    path("effects/<int:pk>/", effects.effect_audits, name="effect_audit"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include((dashboard, "runs"))),
]
