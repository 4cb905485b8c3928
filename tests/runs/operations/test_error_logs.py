"""Unhandled errors are logged as JSON with their request (finding 4 of issue 24: with DEBUG off
Django sends a view's 500 only to mail_admins, which logs nowhere)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the process's log handlers for Django's records (the root's and django's own, not
    pytest's) write to stderr."""
    loggers = [
        logging.getLogger(),
        logging.getLogger("django"),
        logging.getLogger("django.request"),
    ]
    handlers = [
        h
        for log in loggers
        for h in log.handlers
        if type(h) is logging.StreamHandler  # pytest's capture handlers are subclasses
    ]
    stream = io.StringIO()
    previous = [h.setStream(stream) for h in handlers]
    try:
        yield stream
    finally:
        for handler, old in zip(handlers, previous, strict=True):
            handler.setStream(old)


def records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_view_that_raises_with_debug_off_is_one_json_record_with_its_traceback(
    settings, console
) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.support.raising_urls"
    user = User.objects.create_user(username="olivia", password="a long enough passphrase")
    client = Client(raise_request_exception=False)
    client.force_login(user)

    response = client.get("/explode/?x=1", HTTP_X_REQUEST_ID="req-42.abc")

    assert response.status_code == 500
    errors = [r for r in records(console) if r["level"] == "ERROR"]
    assert len(errors) == 1, console.getvalue()
    error = errors[0]
    assert error["logger"] == "django.request"
    assert error["method"] == "GET" and error["path"] == "/explode/"
    assert error["actor"] == "olivia" and error["request_id"] == "req-42.abc"
    assert error["status_code"] == 500
    assert "Boom: the view fell over" in str(error["exc_info"])
    assert "Traceback" in str(error["exc_info"]) and "explode" in str(error["exc_info"])
    assert response["X-Request-ID"] == "req-42.abc"


def test_a_request_id_that_is_not_a_plain_token_is_replaced_by_a_new_one(settings) -> None:
    response = Client().get("/healthz", HTTP_X_REQUEST_ID="<script>" + "x" * 300)
    given = response["X-Request-ID"]
    assert len(given) == 32 and given.isalnum()


def test_a_probe_that_fails_is_logged_with_its_request(settings, console, monkeypatch) -> None:
    """The issue's case: /metrics answered 500 during a database outage with no log line."""
    from django.db import OperationalError

    from runs.operations import metrics

    def outage(*args: object, **kwargs: object) -> tuple[bytes, str]:
        raise OperationalError("connection refused")

    settings.DEBUG = False
    settings.RUNLEDGER_METRICS_TOKEN = "tok-1"
    monkeypatch.setattr(metrics, "exposition", outage)
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION="Bearer tok-1")
    response = client.get("/metrics")
    assert response.status_code == 500
    (error,) = [r for r in records(console) if r["level"] == "ERROR"]
    assert error["path"] == "/metrics" and error["request_id"] == response.get("X-Request-ID")
    assert "OperationalError: connection refused" in str(error["exc_info"])
