"""Response hardening that Django's own settings do not cover."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers


class NoStoreForSignedInMiddleware:
    """``Cache-Control: no-store`` (and private, no-cache) on every page a signed-in person gets.

    A ledger page shows run inputs, results and who did what: no browser or shared cache may
    keep a copy after sign-out. Static files never reach here (WhiteNoise answers them first).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            add_never_cache_headers(response)
        return response
