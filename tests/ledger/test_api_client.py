"""ledger.client against the real API in this process (httpx's WSGI transport into Django), and
its promises: no Django at import, typed answers, problems as exceptions, safe retries."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger import client as rl
from ledger.models import Run
from ledger.processes.execute import run_execute
from runs.api import tokens

pytestmark = pytest.mark.django_db(transaction=True)
#: The runledger-client distribution's package, in this checkout (installed beside, in a venv).
CLIENT_SOURCE = str(Path(__file__).resolve().parents[2] / "client" / "src")


def test_the_client_imports_without_django() -> None:
    code = (
        "import sys, ledger.client; "
        "bad = sorted(m for m in sys.modules if m.startswith('django')); "
        "assert not bad, bad"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": CLIENT_SOURCE},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def api_client() -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="shop", role="operator")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", made.secret, transport=transport, backoff=0.01)


def test_start_wait_result_and_cancel_through_the_client(api_client: rl.Client) -> None:
    run = api_client.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="d-1")
    assert isinstance(run, rl.Run) and run.created and run.status == "queued"
    again = api_client.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="d-1")
    assert again.run_id == run.run_id and again.created is False
    with pytest.raises(rl.Conflict, match=r"inputs\.invoice_id"):
        api_client.start("refund", {"invoice_id": "inv_2"}, idempotency_key="d-1")
    worker = threading.Thread(target=_execute, args=(run.run_id,))
    worker.start()
    done = api_client.wait(run.run_id, timeout=60)
    worker.join()
    assert done.status == "succeeded" and done.finished_at is not None
    assert api_client.result(run.run_id) == Run.objects.get(pk=run.run_id).result
    assert api_client.steps(run.run_id)[0].step_id == "fetch_invoice"
    assert [r.run_id for r in api_client.runs(status="succeeded")] == [run.run_id]
    assert "refund" in {a.name for a in api_client.agents()}

    other = api_client.start("refund", {"invoice_id": "inv_1002"})
    cancelled = api_client.cancel(other.run_id, "the customer withdrew")
    assert cancelled.status == "cancelled"
    with pytest.raises(rl.RunCancelled):
        api_client.result(other.run_id, timeout=1)
    with pytest.raises(rl.InvalidRequest, match="needs inputs invoice_id"):
        api_client.start("refund", {})
    with pytest.raises(rl.NotFound):
        api_client.get("run_nope")


def _execute(run_id: str) -> None:
    from django.db import connection

    try:
        run_execute(run_id=run_id, worker="test-worker", heartbeat=False)
    finally:
        connection.close()


def test_a_start_retried_after_a_lost_answer_is_one_run(api_client: rl.Client) -> None:
    """The first attempt reaches the server and starts the run, but its answer is lost; the
    retry carries the same Idempotency-Key and gets the same run."""
    inner = api_client._http._transport  # the WSGI app
    calls: list[str] = []

    class LosesFirstAnswer(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(request.headers.get("Idempotency-Key", ""))
            answer = inner.handle_request(request)
            if len(calls) == 1:
                raise httpx.ReadError("connection reset", request=request)
            return answer

    api_client._http._transport = LosesFirstAnswer()
    run = api_client.start("refund", {"invoice_id": "inv_1001"})
    assert len(calls) == 2 and calls[0] == calls[1] and calls[0].startswith("client-")
    assert Run.objects.count() == 1 and run.created is False  # the retry found the first


def test_a_cancel_is_not_retried_and_an_unsafe_failure_surfaces(api_client: rl.Client) -> None:
    run = api_client.start("refund", {"invoice_id": "inv_1001"})
    inner = api_client._http._transport
    calls: list[Any] = []

    class Broken(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(request.url.path)
            raise httpx.ConnectError("refused", request=request)

    api_client._http._transport = Broken()
    with pytest.raises(httpx.ConnectError):
        api_client.cancel(run.run_id, "stop")
    assert len(calls) == 1
    api_client._http._transport = inner
    assert api_client.get(run.run_id).status == "queued"
