"""The project's URLs: the admin (at RUNLEDGER_ADMIN_URL, or not at all), the HTTP API
(``runs.api``), sign-in and the dashboard (``runs.dashboard.urls``).

The probes (``/healthz``, ``/readyz``, ``/metrics``) answer in middleware, before these
(``runs.operations.probes``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from runs.api.urls import api
from runs.operations import alert_inbound

urlpatterns = [
    # RUNLEDGER_ADMIN_URL moves the admin or, `off`, leaves it unmounted.
    *(
        [path(settings.RUNLEDGER_ADMIN_URL, admin.site.urls)]
        if settings.RUNLEDGER_ADMIN_URL
        else []
    ),
    path("api/v1/", api.urls),
    # A pager's acknowledgement back (RUNLEDGER_ALERT_RECEIVERS' inbound_secret).
    path("hooks/alerts/<slug:receiver>", alert_inbound.alert_hook, name="alert-hook"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("runs.dashboard.urls")),
]
