from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, register_converter

from runs import action_views, audit_views, bulk_views, settle_views, views


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
    path("", views.run_list, name="list"),
    path("runs/<run_id:run_id>/", views.run_detail, name="detail"),
    path("runs/<run_id:run_id>/header/", views.run_header, name="header"),
    path("runs/<run_id:run_id>/steps/", views.step_table, name="steps"),
    path("runs/<run_id:run_id>/steps/<int:pk>/result/", views.step_result, name="step_result"),
    path("runs/<run_id:run_id>/preview/", views.run_preview, name="preview"),
    path("runs/<run_id:run_id>/ledger.json", views.ledger_json, name="ledger_json"),
    # The acting side: settlements, stale steps, run actions, bulk, audit.
    path("settlements/", settle_views.settlement_queue, name="settlements"),
    path("runs/<run_id:run_id>/steps/<int:pk>/settle/", settle_views.settle_page, name="settle"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/propose/",
        settle_views.settle_propose,
        name="settle_propose",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/settle/lookup/",
        settle_views.settle_lookup,
        name="settle_lookup",
    ),
    path(
        "settlements/<int:pk>/approve/", settle_views.settlement_approve, name="settlement_approve"
    ),
    path("settlements/<int:pk>/reject/", settle_views.settlement_reject, name="settlement_reject"),
    path("runs/<run_id:run_id>/steps/<int:pk>/stale/", action_views.stale_page, name="stale"),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/accept/",
        action_views.stale_accept,
        name="stale_accept",
    ),
    path(
        "runs/<run_id:run_id>/steps/<int:pk>/stale/reexecute/",
        action_views.stale_reexecute,
        name="stale_reexecute",
    ),
    path("runs/<run_id:run_id>/fork/", action_views.run_fork, name="fork"),
    *[
        path(f"runs/<run_id:run_id>/{a}/", action_views.run_action, {"action": a}, name=a)
        for a in action_views.RUN_ACTIONS
    ],
    path("bulk/", bulk_views.bulk_preview, name="bulk"),
    path("bulk/apply/", bulk_views.bulk_apply, name="bulk_apply"),
    path("audit/", audit_views.audit, name="audit"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include((dashboard, "runs"))),
]
