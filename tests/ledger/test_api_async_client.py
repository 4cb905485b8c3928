"""``AsyncClient`` against the real API served by a live server in this process: the sync
client's calls, awaited, with the same answers and errors."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import httpx
import pytest

from ledger import client as rl
from ledger.models import Run
from ledger.processes.execute import run_execute
from runs.api import tokens

pytestmark = pytest.mark.django_db(transaction=True)


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_the_async_client_has_the_sync_clients_methods() -> None:
    sync, aio = _public(rl.Client), _public(rl.AsyncClient)
    sync.pop("close")
    aio.pop("aclose")
    assert sorted(aio) == sorted(sync)
    for name, signature in sync.items():
        assert str(aio[name].parameters) == str(signature.parameters), name
        method = getattr(rl.AsyncClient, name)
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name


def test_start_wait_result_list_and_refusals_through_the_async_client(live_server: Any) -> None:
    secret = tokens.token_create(name="shop", role="operator").secret

    async def story() -> tuple[rl.Run, rl.Run, Any, list[rl.RunSummary], list[rl.Agent]]:
        async with rl.AsyncClient(live_server.url, secret, backoff=0.01) as aio:
            run = await aio.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="k-1")
            again = await aio.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="k-1")
            with pytest.raises(rl.Conflict, match=r"inputs\.invoice_id"):
                await aio.start("refund", {"invoice_id": "inv_2"}, idempotency_key="k-1")
            with pytest.raises(rl.NotFound):
                await aio.get("run_missing")
            worker = threading.Thread(target=_execute, args=(run.run_id,))
            worker.start()
            done = await aio.wait(run.run_id, timeout=120)
            await asyncio.to_thread(worker.join)
            assert done.settled, done
            result = await aio.result(run.run_id)
            listed = [summary async for summary in aio.runs(agent="refund")]
            return run, again, result, listed, await aio.agents()

    run, again, result, listed, agents = asyncio.run(story())
    assert run.created is True and run.status == "queued"
    assert again.run_id == run.run_id and again.created is False
    assert result == Run.objects.get(pk=run.run_id).result is not None
    assert [s.run_id for s in listed] == [run.run_id]
    assert "refund" in {a.name for a in agents}


def _execute(run_id: str) -> None:
    from django.db import connection

    try:
        run_execute(run_id=run_id, worker="worker-1", heartbeat=False)
    finally:
        connection.close()


def test_the_async_client_raises_unexpected_answer_as_the_sync_one_does() -> None:
    moved = httpx.MockTransport(
        lambda request: httpx.Response(301, headers={"Location": "https://runs.example/api/v1/"})
    )
    html = httpx.MockTransport(
        lambda request: httpx.Response(
            200, text="<html>sign in</html>", headers={"Content-Type": "text/html"}
        )
    )

    async def agents(transport: httpx.AsyncBaseTransport) -> None:
        async with rl.AsyncClient("http://runs.example", "rl_x", transport=transport) as aio:
            await aio.agents()

    with pytest.raises(rl.UnexpectedAnswer, match=r"redirects to https://runs\.example/api/v1/"):
        asyncio.run(agents(moved))
    with pytest.raises(rl.UnexpectedAnswer, match="sign in"):
        asyncio.run(agents(html))
