"""The project's URLs: the admin (at RUNLEDGER_ADMIN_URL, or not at all), the HTTP API
(``runs.api``), sign-in and the dashboard (``runs.dashboard.urls``).

The probes (``/healthz``, ``/readyz``, ``/metrics``) answer in middleware, before these
(``runs.operations.probes``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from runs.api.urls import api
from runs.dashboard.views import sign_in
from runs.operations import alert_inbound

urlpatterns = [
    # RUNLEDGER_ADMIN_URL moves the admin or, `off`, leaves it unmounted. Its sign-in follows
    # RUNLEDGER_LOCAL_LOGIN (runs.dashboard.views.sign_in).
    *(
        [
            path(f"{settings.RUNLEDGER_ADMIN_URL}login/", sign_in.admin_login),
            path(settings.RUNLEDGER_ADMIN_URL, admin.site.urls),
        ]
        if settings.RUNLEDGER_ADMIN_URL
        else []
    ),
    path("api/v1/", api.urls),
    # A pager's acknowledgement back (RUNLEDGER_ALERT_RECEIVERS' inbound_secret).
    path("hooks/alerts/<slug:receiver>", alert_inbound.alert_hook, name="alert-hook"),
    path("accounts/login/", sign_in.SignInView.as_view(), name="login"),
    path("accounts/logout/", sign_in.sign_out, name="logout"),
    # Single sign-on (RUNLEDGER_OIDC_ISSUER): register .../accounts/sso/callback/ at the provider.
    path("accounts/sso/", sign_in.sso_start, name="sso_start"),
    path("accounts/sso/callback/", sign_in.sso_callback, name="sso_callback"),
    path("", include("runs.dashboard.urls")),
]
