"""A URL whose view raises, beside the project's own: an unhandled error for the log tests."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from runs.urls import urlpatterns as project


class Boom(RuntimeError):
    pass


def explode(request: HttpRequest) -> HttpResponse:
    raise Boom("the view fell over")


urlpatterns = [path("explode/", explode), *project]
