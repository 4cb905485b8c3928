"""Events sent to a run through the HTTP API (``POST /api/v1/runs/{run_id}/events``), the
clients' ``send_event`` (sync and async) and ``runledger send_event``: idempotent by the event
id, taken by the agent once, and every refusal a problem document that wrote nothing."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import client as rl
from ledger.models import MailboxEvent, Run
from ledger.processes.execute import run_execute
from runs.api import tokens
from tests.support import wait_agents  # noqa: F401 - registers the listener
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    return answer.json()  # type: ignore[no-any-return]


def listener(tmp_path: Path, count: int = 2) -> str:
    run = start_unannounced(
        agent="listener", inputs={"count": count, "marks": str(tmp_path / "marks")}
    )
    return run.run_id


def execute(run_id: str) -> Any:
    return run_execute(run_id=run_id, worker="worker-1", heartbeat=False)


def test_an_event_is_201_a_repeat_200_and_the_agent_takes_them_in_order(
    caller: Any, tmp_path: Path
) -> None:
    shop = caller("operator", name="shop")
    run_id = listener(tmp_path)
    url = f"/api/v1/runs/{run_id}/events"

    first = shop.post(url, {"name": "reply", "payload": {"text": "yes"}, "event_id": "m-1"})
    assert first.status_code == 201, first.content
    body = first.json()
    assert (body["event_id"], body["created"], body["consumed_step_id"]) == ("m-1", True, "")
    again = shop.post(url, {"name": "reply", "payload": {"text": "yes"}, "event_id": "m-1"})
    assert again.status_code == 200 and again.json()["created"] is False
    shop.post(url, {"name": "reply", "payload": [2], "event_id": "m-2"})

    assert execute(run_id).result == {"got": [{"text": "yes"}, [2]]}
    events = MailboxEvent.objects.order_by("pk")
    assert [(e.event_id, e.consumed_step_id, e.sender) for e in events] == [
        ("m-1", "reply.0", "api:shop"),
        ("m-2", "reply.1", "api:shop"),
    ]


def test_bad_events_are_problems_that_write_nothing(
    caller: Any, tmp_path: Path, settings: Any
) -> None:
    shop = caller("operator")
    run_id = listener(tmp_path)
    url = f"/api/v1/runs/{run_id}/events"
    shop.post(url, {"name": "reply", "payload": 1, "event_id": "m-1"})
    settings.RUNLEDGER_MAX_EVENT_BYTES = 64
    before = ledger_rows()

    problem(shop.post("/api/v1/runs/run_nope/events", {"name": "reply", "event_id": "x"}), 404)
    doc = problem(shop.post(url, {"name": "reply", "payload": 2, "event_id": "m-1"}), 409)
    assert doc["current"]["payload"] == 1
    problem(shop.post(url, {"name": "reply", "payload": "x" * 100, "event_id": "m-2"}), 413)
    problem(shop.post(url, raw=b'{"name": "reply", "payload": '), 400)  # not JSON at all
    problem(shop.post(url, raw=b'{"name": "reply", "payload": NaN}'), 400)
    problem(shop.post(url, {"name": "", "event_id": "m-3"}), 422)
    problem(shop.post(url, {"name": "reply", "surprise": 1}), 422)
    problem(caller("viewer").post(url, {"name": "reply", "event_id": "m-4"}), 403)
    assert ledger_rows() == before

    Run.objects.filter(pk=run_id).update(status="cancelled")  # finished
    before = ledger_rows()
    problem(shop.post(url, {"name": "reply", "event_id": "m-5"}), 409)
    assert ledger_rows() == before


def _client(secret: str) -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", secret, transport=transport, backoff=0.01)


def test_the_client_sends_events_idempotently(tmp_path: Path) -> None:
    from tests.support.dashboard_runs import restore_roles

    restore_roles()
    run_id = listener(tmp_path)
    with _client(tokens.token_create(name="shop", role="operator").secret) as shop:
        sent = shop.send_event(run_id, "reply", {"ok": True}, event_id="hook-1")
        assert isinstance(sent, rl.SentEvent) and sent.created and sent.event_id == "hook-1"
        assert shop.send_event(run_id, "reply", {"ok": True}, event_id="hook-1").created is False
        with pytest.raises(rl.Conflict):
            shop.send_event(run_id, "reply", {"ok": False}, event_id="hook-1")
        with pytest.raises(rl.NotFound):
            shop.send_event("run_gone", "reply", 1)
        made = shop.send_event(run_id, "reply", 2)  # an id made for the call
        assert made.event_id.startswith("client-")
    assert execute(run_id).result == {"got": [{"ok": True}, 2]}


def test_the_async_client_sends_events(live_server: Any, tmp_path: Path) -> None:
    secret = tokens.token_create(name="shop", role="operator").secret
    run_id = listener(tmp_path, count=1)

    async def send() -> tuple[rl.SentEvent, rl.SentEvent]:
        async with rl.AsyncClient(live_server.url, secret, backoff=0.01) as aio:
            first = await aio.send_event(run_id, "reply", "hi", event_id="a-1")
            again = await aio.send_event(run_id, "reply", "hi", event_id="a-1")
            with pytest.raises(rl.Conflict):
                await aio.send_event(run_id, "reply", "bye", event_id="a-1")
            return first, again

    first, again = asyncio.run(send())
    assert (first.created, again.created) == (True, False)
    assert MailboxEvent.objects.count() == 1
    assert execute(run_id).result == {"got": ["hi"]}


def test_runledger_send_event(tmp_path: Path) -> None:
    run_id = listener(tmp_path, count=1)
    out = io.StringIO()
    call_command(
        "send_event", run_id, "reply", "--payload", '{"a": 1}', "--event-id", "c-1", stdout=out
    )
    assert "sent" in out.getvalue() and "c-1" in out.getvalue()
    call_command(
        "send_event", run_id, "reply", "--payload", '{"a": 1}', "--event-id", "c-1", stdout=out
    )
    assert "already sent" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("send_event", run_id, "reply", "--payload", '{"a": 2}', "--event-id", "c-1")
    with pytest.raises(CommandError):
        call_command("send_event", run_id, "reply", "--payload", "{not json")
    event = MailboxEvent.objects.get()
    assert event.payload == {"a": 1} and event.sender.startswith("cli:")
    assert event.created_at <= timezone.now()
