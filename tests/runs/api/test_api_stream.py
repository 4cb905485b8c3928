"""The run's stream over HTTP (``GET /api/v1/runs/{run_id}/stream``, Server-Sent Events) and
start-and-wait (``POST /api/v1/runs?wait=``), in this process, and their refusals."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest
from django.db import connection

from ledger import client as rl
from ledger.models import Run, StreamEvent
from ledger.processes.execute import run_execute
from runs.api import tokens
from tests.support import stream_agents

pytestmark = pytest.mark.django_db(transaction=True)

PROGRESS = {"agent": stream_agents.NAME, "inputs": {"steps": 3}}


def _events(answer: Any) -> list[tuple[str, str, Any]]:
    """(event type, id, data) of each event of a streamed answer."""
    text = b"".join(answer.streaming_content).decode()
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            fields[name] = value.lstrip(" ")
        if "data" in fields:
            out.append(
                (fields.get("event", "message"), fields.get("id", ""), json.loads(fields["data"]))
            )
    return out


def _worker(stop: threading.Event) -> threading.Thread:
    """A worker thread that executes every queued run until ``stop``."""

    def work() -> None:
        try:
            while not stop.is_set():
                for run_id in Run.objects.filter(status="queued").values_list("pk", flat=True):
                    run_execute(run_id=run_id, worker="api-test-worker")
                time.sleep(0.05)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_the_stream_sends_each_event_once_in_order_and_resumes_after_last_event_id(
    caller: Any, execute: Any
) -> None:
    shop = caller("viewer")
    run_id = caller("operator").post("/api/v1/runs", PROGRESS).json()["run_id"]
    execute(run_id)
    answer = shop.get(f"/api/v1/runs/{run_id}/stream")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/event-stream"
    events = _events(answer)
    kinds = [(e[0], e[2].get("kind"), e[2].get("data")) for e in events]
    assert kinds == [
        ("message", "progress", {"i": 0, "of": 3}),
        ("message", "progress", {"i": 1, "of": 3}),
        ("message", "progress", {"i": 2, "of": 3}),
        ("message", "done", {"total": 5}),
        ("end", None, None),
    ]
    assert events[-1][2] == {"status": "succeeded"}
    ids = [int(e[1]) for e in events[:-1]]
    assert ids == sorted(ids) and [e[2]["id"] for e in events[:-1]] == ids

    rest = _events(shop.get(f"/api/v1/runs/{run_id}/stream", HTTP_LAST_EVENT_ID=str(ids[1])))
    assert [int(e[1]) for e in rest[:-1]] == ids[2:] and rest[-1][0] == "end"


def test_a_stream_of_an_unknown_run_is_404_and_a_bad_last_event_id_422(caller: Any) -> None:
    shop = caller("viewer")
    missing = shop.get("/api/v1/runs/run_nope/stream")
    assert missing.status_code == 404
    assert missing["Content-Type"].startswith("application/problem+json")
    assert "no run" in missing.json()["detail"]
    run_id = caller("operator").post("/api/v1/runs", PROGRESS).json()["run_id"]
    bad = shop.get(f"/api/v1/runs/{run_id}/stream", HTTP_LAST_EVENT_ID="12abc")
    assert bad.status_code == 422 and "Last-Event-ID" in bad.json()["detail"]
    unknown = shop.get(f"/api/v1/runs/{run_id}/stream?after=3")
    assert unknown.status_code == 422


@pytest.mark.parametrize("wait", ["61", "-1", "soon"])
def test_a_wait_out_of_range_is_422_and_starts_nothing(caller: Any, wait: str) -> None:
    answer = caller("operator").post(f"/api/v1/runs?wait={wait}", PROGRESS)
    assert answer.status_code == 422, answer.content
    assert answer["Content-Type"].startswith("application/problem+json")
    assert not Run.objects.exists()


def test_start_and_wait_answers_with_the_settled_run(caller: Any) -> None:
    stop = threading.Event()
    worker = _worker(stop)
    try:
        answer = caller("operator").post("/api/v1/runs?wait=60", PROGRESS)
    finally:
        stop.set()
        worker.join(30)
    assert answer.status_code == 201, answer.content
    run = answer.json()
    assert (run["status"], run["settled"], run["result"]) == ("succeeded", True, {"total": 5})
    assert run["created"] is True


@pytest.fixture
def api_client() -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="shop", role="operator")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", made.secret, transport=transport, backoff=0.01)


def test_the_clients_run_starts_and_waits_and_its_stream_reads_every_event(
    api_client: rl.Client,
) -> None:
    stop = threading.Event()
    worker = _worker(stop)
    try:
        run = api_client.run(stream_agents.NAME, {"steps": 2}, timeout=120)
    finally:
        stop.set()
        worker.join(30)
    assert (run.status, run.settled, run.result) == ("succeeded", True, {"total": 1})
    events = list(api_client.stream(run.run_id))
    assert [(e.kind, e.data) for e in events] == [
        ("progress", {"i": 0, "of": 2}),
        ("progress", {"i": 1, "of": 2}),
        ("done", {"total": 1}),
    ]
    assert all(isinstance(e, rl.StreamEvent) and e.at is not None for e in events)
    later = list(api_client.stream(run.run_id, last_event_id=events[0].id))
    assert later == events[1:]
    with pytest.raises(rl.NotFound):
        list(api_client.stream("run_missing"))
    assert StreamEvent.objects.filter(run_id=run.run_id).count() == 3


def test_a_web_process_serves_a_bounded_number_of_streams_and_refuses_more_with_503(
    caller: Any,
) -> None:
    from runs.api import sse

    shop = caller("viewer")
    run_id = caller("operator").post("/api/v1/runs", PROGRESS).json()["run_id"]
    held = [shop.get(f"/api/v1/runs/{run_id}/stream") for _ in range(sse.MAX_STREAMS)]
    assert all(a.status_code == 200 for a in held)
    refused = shop.get(f"/api/v1/runs/{run_id}/stream")
    assert refused.status_code == 503 and refused["Retry-After"] == "2"
    assert refused.json()["title"] == "Too many streams"
    for answer in held:
        answer.close()  # the readers went away: their places are free again
    again = shop.get(f"/api/v1/runs/{run_id}/stream")
    assert again.status_code == 200
    again.close()


def test_the_async_clients_run_and_stream(live_server: Any) -> None:
    import asyncio

    secret = tokens.token_create(name="shop-async", role="operator").secret

    async def story() -> tuple[rl.Run, list[rl.StreamEvent], list[rl.StreamEvent]]:
        async with rl.AsyncClient(live_server.url, secret, backoff=0.01) as aio:
            run = await aio.run(stream_agents.ASYNC_NAME, {"steps": 2}, timeout=120)
            events = [e async for e in aio.stream(run.run_id)]
            later = [e async for e in aio.stream(run.run_id, last_event_id=events[1].id)]
            with pytest.raises(rl.NotFound):
                [e async for e in aio.stream("run_missing")]
            return run, events, later

    stop = threading.Event()
    worker = _worker(stop)
    try:
        run, events, later = asyncio.run(story())
    finally:
        stop.set()
        worker.join(30)
    assert (run.status, run.settled, run.result) == ("succeeded", True, {"total": 1})
    assert [(e.kind, e.data) for e in events] == [
        ("progress", {"i": 0, "of": 2}),
        ("progress", {"i": 1, "of": 2}),
        ("done", {"total": 1}),
    ]
    assert later == events[2:]
