"""Flow control through the HTTP API and the clients: a start's concurrency key and limit;
bad options are 422 problem documents and write nothing."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from ledger import client as rl
from ledger.models import Run
from runs.api import tokens
from tests.support import paced_agents  # noqa: F401 - registers the agents

pytestmark = pytest.mark.django_db(transaction=True)


def problem(answer: Any, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.content
    assert answer["Content-Type"] == "application/problem+json"
    return answer.json()


def test_a_start_with_a_concurrency_key_answers_it(caller: Any) -> None:
    shop = caller("operator", name="shop")
    body = {"agent": "paced-free", "concurrency_key": "sandbox", "concurrency_limit": 2}
    answer = shop.post("/api/v1/runs", body)
    assert answer.status_code == 201, answer.content
    run = answer.json()
    assert (run["concurrency_key"], run["concurrency_limit"]) == ("sandbox", 2)
    row = Run.objects.get(pk=run["run_id"])
    assert (row.concurrency_key, row.concurrency_limit) == ("sandbox", 2)
    declared = shop.post("/api/v1/runs", {"agent": "paced", "inputs": {"customer": "cus_1"}})
    assert declared.json()["concurrency_key"] == "customer:cus_1"


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency_key": "k", "concurrency_limit": -1},
        {"concurrency_key": "k", "concurrency_limit": 0},
        {"concurrency_key": "k", "concurrency_limit": "two"},
        {"concurrency_key": ""},
        {"concurrency_limit": 3},
        {"priority": -1},
        {"priority": 10},
        {"priority": "high"},
        {"start_at": "tomorrow"},
        {"start_at": "2026-12-03T14:00:00"},
        {"start_at": "2999-01-01T00:00:00Z"},
        {"deadline": 0},
        {"deadline": -5},
        {"deadline": "2001-01-01T00:00:00Z"},
        {"deadline": "soon"},
    ],
)
def test_bad_concurrency_options_are_422_and_write_nothing(caller: Any, options: Any) -> None:
    shop = caller("operator", name="shop")
    field = next(iter(options)).split("_")[0]
    doc = problem(shop.post("/api/v1/runs", {"agent": "paced-free", **options}), 422)
    assert field in json.dumps(doc)
    batch = shop.post("/api/v1/runs/batch", {"runs": [{"agent": "paced-free", **options}]})
    assert field in json.dumps(problem(batch, 422))
    assert not Run.objects.exists()


def test_the_client_sends_the_concurrency_key() -> None:
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="shop", role="operator")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    api = rl.Client("http://testserver", made.secret, transport=transport, backoff=0.01)
    run = api.start("paced-free", {}, concurrency_key="sandbox", concurrency_limit=3, priority=7)
    assert (run.concurrency_key, run.concurrency_limit, run.priority) == ("sandbox", 3, 7)
    many = api.start_many([{"agent": "paced-free", "concurrency_key": "sandbox"}])
    assert (many[0].concurrency_key, many[0].concurrency_limit) == ("sandbox", 1)
    with pytest.raises(rl.InvalidRequest):
        api.start("paced-free", {}, concurrency_key="sandbox", concurrency_limit=0)
    assert Run.objects.count() == 2
    at = datetime.now(UTC) + timedelta(hours=2)
    later = api.start("paced-free", {}, start_at=at)
    assert later.status == "queued" and later.not_before is not None
    assert abs(later.not_before - at) < timedelta(milliseconds=1)  # the answer shows ms
    assert Run.objects.get(pk=later.run_id).wake_at == at
    bounded = api.start("paced-free", {}, deadline=90)
    assert bounded.deadline_at is not None and bounded.created_at is not None
    assert bounded.deadline_at - bounded.created_at == timedelta(seconds=90)


def test_the_async_client_sends_the_same_body() -> None:
    sent: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        body = {"run_id": "run_1", "agent": "paced-free", "status": "queued", "created": True}
        return httpx.Response(201, json={**body, "concurrency_key": "sandbox"})

    async def start() -> rl.Run:
        transport = httpx.MockTransport(answer)
        async with rl.AsyncClient("http://x", "t", transport=transport) as aio:
            return await aio.start(
                "paced-free", {}, concurrency_key="sandbox", concurrency_limit=2, priority=9
            )

    run = asyncio.run(start())
    assert run.concurrency_key == "sandbox"
    assert sent == [
        {
            "agent": "paced-free",
            "inputs": {},
            "concurrency_key": "sandbox",
            "concurrency_limit": 2,
            "priority": 9,
        }
    ]
