"""Signing in and out: the password form (``RUNLEDGER_LOCAL_LOGIN``), single sign-on through
the OpenID Connect provider (``runs.dashboard.sso``) and the admin's sign-in, which follows the
same switch.

With local sign-in off, no password is checked anywhere a browser can post one: the sign-in
form and the admin's answer 403 to a POST without looking at it (and so django-axes counts
nothing). Signing out ends the session and, for a person who signed in through a provider that
offers an ``end_session_endpoint``, sends them there (RP-initiated logout) to end theirs too.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin, auth
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render, resolve_url
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

log = logging.getLogger("runs.sso")

#: The session keys (``runs.dashboard.sso`` reads them too; kept here so that a process without
#: the SSO extra never imports it).
SESSION_ID_TOKEN = "runledger_sso_id_token"
SESSION_NEXT = "runledger_sso_next"


def _sso_context() -> dict[str, Any]:
    config = settings.RUNLEDGER_SSO
    return {
        "sso_name": config.provider_name if config is not None else "",
        "local_login": settings.RUNLEDGER_LOCAL_LOGIN,
    }


class SignInView(LoginView):
    """Django's sign-in view, with the provider's button and the switch for passwords."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **_sso_context()}

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.RUNLEDGER_LOCAL_LOGIN:
            return local_login_refused(request, next_url=request.POST.get("next", ""))
        return super().post(request, *args, **kwargs)


def local_login_refused(request: HttpRequest, *, next_url: str = "") -> HttpResponse:
    """403: passwords are not accepted here (the sign-in page, without its form)."""
    context = {**_sso_context(), "next": next_url, "password_refused": True}
    return render(request, "registration/login.html", context, status=403)


@never_cache
def admin_login(request: HttpRequest) -> HttpResponseBase:
    """The admin's sign-in: its own form while passwords are on; else the sign-in page (the
    provider), and a POST is refused."""
    if settings.RUNLEDGER_LOCAL_LOGIN:
        return admin.site.login(request)
    next_url = request.GET.get("next") or reverse("admin:index")
    if request.method == "POST":
        return local_login_refused(request, next_url=next_url)
    return redirect(f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': next_url})}")


def _safe_next(request: HttpRequest, url: str) -> str:
    allowed = url_has_allowed_host_and_scheme(
        url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return url if url and allowed else resolve_url(settings.LOGIN_REDIRECT_URL)


def _failed(request: HttpRequest, why: str, *, status: int = 400) -> HttpResponse:
    context = {**_sso_context(), "why": why}
    return render(request, "registration/sso_failed.html", context, status=status)


@require_GET
@never_cache
def sso_start(request: HttpRequest) -> HttpResponseBase:
    """Off to the provider's authorization endpoint (code flow, PKCE S256, state and nonce)."""
    config = settings.RUNLEDGER_SSO
    if config is None:
        raise Http404("single sign-on is not set up")
    from runs.dashboard import sso

    request.session[SESSION_NEXT] = _safe_next(request, request.GET.get("next", ""))
    callback = request.build_absolute_uri(reverse("sso_callback"))
    try:
        response: HttpResponseBase = sso.provider(config).authorize_redirect(request, callback)
    except Exception as exc:  # the provider unreachable or its discovery document wrong
        log.warning("sso: the provider cannot be reached: %s", exc)
        return _failed(request, f"{config.provider_name} cannot be reached now.", status=502)
    return response


@require_GET
@never_cache
def sso_callback(request: HttpRequest) -> HttpResponse:
    """Back from the provider: the code exchanged (with the PKCE verifier), the ID token
    checked, the person's roles replaced from their groups; signed in when they hold one."""
    config = settings.RUNLEDGER_SSO
    if config is None:
        raise Http404("single sign-on is not set up")
    from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError

    from runs.dashboard import sso

    try:
        client = sso.provider(config)
        token = client.authorize_access_token(request)
        claims = sso.claims_of(client, token, config)
    except MismatchingStateError:
        log.warning("sso: a callback whose state this session did not send")
        return _failed(request, "This answer from the provider is not for this browser's sign-in.")
    except (OAuthError, sso.SsoError) as exc:
        log.warning("sso: sign-in refused: %s", exc)
        return _failed(request, f"{config.provider_name} did not sign you in ({exc}).")
    except Exception:  # a token or signature that does not verify, the provider unreachable
        log.exception("sso: the provider's answer could not be verified")
        return _failed(request, f"The answer from {config.provider_name} could not be verified.")
    next_url = request.session.pop(SESSION_NEXT, "") or resolve_url(settings.LOGIN_REDIRECT_URL)
    user, roles, groups = sso.sign_in(claims=claims, config=config, at=timezone.now())
    if not roles or not user.is_active:
        context = {**_sso_context(), "person": user.get_username(), "groups": groups[:20]}
        context["inactive"] = not user.is_active
        return render(request, "registration/sso_refused.html", context, status=403)
    auth.login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[SESSION_ID_TOKEN] = token["id_token"]
    return redirect(_safe_next(request, next_url))


@require_POST
def sign_out(request: HttpRequest) -> HttpResponseBase:
    """End the session; then the provider's own sign-out, when the person came through it."""
    id_token = request.session.get(SESSION_ID_TOKEN)
    auth.logout(request)
    after = request.build_absolute_uri(resolve_url(settings.LOGOUT_REDIRECT_URL))
    config = settings.RUNLEDGER_SSO
    if config is None or not id_token:
        return redirect(after)
    from runs.dashboard import sso

    try:
        endpoint = sso.provider(config).load_server_metadata().get("end_session_endpoint")
    except Exception as exc:
        log.warning("sso: the provider cannot be reached to sign out there: %s", exc)
        endpoint = None
    if not endpoint:
        return redirect(after)
    hint = {"id_token_hint": id_token, "post_logout_redirect_uri": after}
    query = urlencode({**hint, "client_id": config.client_id})
    return redirect(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}")
