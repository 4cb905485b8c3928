"""ledger.client facing answers that are not the API's JSON (an HTTPS-only server asked over
plain HTTP, a proxy's HTML page, an empty body), and what its reference page names."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import httpx
import pytest
from django.test import override_settings

from ledger import client as rl
from ledger.models import Run
from runs.api import tokens

pytestmark = pytest.mark.django_db(transaction=True)

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "client-reference.md"


def _client(secret: str = "rl_none", **kw: object) -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", secret, transport=transport, backoff=0.01, **kw)  # type: ignore[arg-type]


def test_an_https_only_server_asked_over_http_is_a_named_error_saying_where_it_redirects() -> None:
    made = tokens.token_create(name="shop", role="operator")
    with override_settings(SECURE_SSL_REDIRECT=True):
        runledger = _client(made.secret)  # Django's SecurityMiddleware redirects to https
        with pytest.raises(rl.UnexpectedAnswer) as refused:
            runledger.start("refund", {"invoice_id": "inv_1001"})
        with pytest.raises(rl.UnexpectedAnswer, match="https://testserver/api/v1/runs/r1"):
            runledger.get_run("r1")
    error = refused.value
    assert isinstance(error, rl.ApiError)
    assert error.status == 301 and error.location == "https://testserver/api/v1/runs"
    assert "301" in str(error) and "redirects to https://testserver/api/v1/runs" in str(error)
    assert not Run.objects.exists()  # the redirect was not followed


@pytest.mark.parametrize(
    ("status", "headers", "body", "says"),
    [
        (200, {"Content-Type": "text/html"}, "<html><body><h1>Welcome to nginx!</h1>", "nginx"),
        (200, {}, "", "an empty body"),
        (404, {"Content-Type": "text/html"}, "<html>\n<h1>Not Found</h1>\n" + "x" * 5000, "Not"),
        (502, {"Content-Type": "text/html"}, "<html><h1>502 Bad Gateway</h1></html>", "Bad Gate"),
    ],
)
def test_an_answer_that_is_not_json_is_a_named_error_with_its_status_and_an_excerpt(
    status: int, headers: dict[str, str], body: str, says: str
) -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(status, headers=headers, content=body.encode())

    runledger = rl.Client(
        "http://proxy.example", "rl_x", transport=httpx.MockTransport(answer), backoff=0.001
    )
    with pytest.raises(rl.UnexpectedAnswer) as refused:
        runledger.get_run("r1")
    error = refused.value
    assert error.status == status and says in str(error) and len(str(error)) < 400
    assert error.excerpt == " ".join(body.split())[:199] + ("…" if len(body) > 200 else "")
    assert error.content_type == headers.get("Content-Type", "")
    assert len(calls) == (1 + runledger.retries if status == 502 else 1)  # safe: retried


def test_get_run_reads_one_run_and_get_is_its_old_name() -> None:
    made = tokens.token_create(name="shop", role="operator")
    runledger = _client(made.secret)
    run = runledger.start("refund", {"invoice_id": "inv_1001"})
    assert runledger.get_run(run.run_id).run_id == run.run_id and run.created is True
    assert runledger.get(run.run_id) == runledger.get_run(run.run_id)
    with pytest.raises(rl.NotFound):
        runledger.get_run("run_nope")


def test_the_client_reference_names_every_public_method_and_error() -> None:
    text = REFERENCE.read_text()
    methods = [
        name
        for name, _ in inspect.getmembers(rl.Client, inspect.isfunction)
        if not name.startswith("_") and name != "close"
    ]
    named = set(re.findall(r"`(\w+)\(", text))
    assert set(methods) - named == set(), "methods missing from docs/client-reference.md"
    errors = [n for n in rl.__all__ if isinstance(getattr(rl, n), type) and n != "Client"]
    assert {e for e in errors if f"`{e}`" not in text} == set()
