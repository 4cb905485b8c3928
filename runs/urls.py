from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from runs import views

dashboard = [
    path("", views.run_list, name="list"),
    path("runs/<str:run_id>/", views.run_detail, name="detail"),
    path("runs/<str:run_id>/header/", views.run_header, name="header"),
    path("runs/<str:run_id>/steps/", views.step_table, name="steps"),
    path("runs/<str:run_id>/steps/<int:pk>/result/", views.step_result, name="step_result"),
    path("runs/<str:run_id>/preview/", views.run_preview, name="preview"),
    path("runs/<str:run_id>/ledger.json", views.ledger_json, name="ledger_json"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include((dashboard, "runs"))),
]
