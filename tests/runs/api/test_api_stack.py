"""The API on a real stack on loopback: gunicorn, a Celery worker and beat, this suite's
PostgreSQL and Redis (database 4), driven by ``ledger.client`` over HTTP."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.api_stack import ApiStack
from ledger import client as rl
from ledger.examples.models import ProviderCharge
from ledger.models import Run
from runs.api import tokens

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BROKER = "redis://127.0.0.1:6379/4"


def redis_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


needs_redis = pytest.mark.skipif("not redis_reachable()", reason="needs Redis on 127.0.0.1:6379")


@pytest.fixture
def token() -> str:
    return tokens.token_create(name="shop", role="operator").secret


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[ApiStack]:
    with ApiStack(tmp_path, broker_url=BROKER) as running:
        yield running


@needs_redis
def test_the_client_starts_runs_waits_and_reads_results_over_http(
    stack: ApiStack, token: str
) -> None:
    stack.worker("w1", concurrency=2)
    with rl.Client(stack.url, token) as api:
        runs = [api.start("refund", {"invoice_id": f"inv_100{i}"}) for i in (1, 2, 3)]
        for run in runs:
            done = api.wait(run.run_id, timeout=120)
            assert done.status == "succeeded", (done, stack.log("w1"))
            assert api.result(run.run_id) == Run.objects.get(pk=run.run_id).result
        # The same key again is the same run (200), other inputs are a 409 problem.
        first = api.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="dispute-1")
        again = api.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="dispute-1")
        assert first.created and again.created is False and again.run_id == first.run_id
        raw = httpx.post(
            f"{stack.url}/api/v1/runs",
            json={"agent": "refund", "inputs": {"invoice_id": "inv_1009"}},
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "dispute-1"},
        )
        assert raw.status_code == 409 and raw.headers["content-type"] == "application/problem+json"
        assert "inputs.invoice_id" in raw.json()["detail"]
        assert api.wait(first.run_id, timeout=120).status == "succeeded"
    assert Run.objects.count() == 4


@needs_redis
def test_a_worker_killed_inside_an_effect_is_recovered_and_wait_answers_the_result(
    tmp_path: Path, token: str
) -> None:
    mark = tmp_path / "killed"
    env = {
        "RUNLEDGER_KILL_AT": "charge.after_effect",
        "RUNLEDGER_KILL_MARK": str(mark),  # once: the pool child that replaces it goes on
    }
    with ApiStack(tmp_path / "stack", broker_url=BROKER, env=env) as stack:
        stack.worker("w1")
        with rl.Client(stack.url, token) as api:
            run = api.start("refund", {"invoice_id": "inv_1001"}, idempotency_key="d-kill")
            done = api.wait(run.run_id, timeout=180)
            assert mark.exists(), "the worker was not killed inside the effect"
            assert done.status == "succeeded", (done, stack.log("w1"))
            assert done.resume_count >= 1  # it was resumed after the kill
            charges = ProviderCharge.objects.all()
            assert charges.count() == 1  # the effect happened once
            assert api.result(run.run_id)["charge_id"] == charges.get().charge_id


def test_a_batch_started_over_http_is_fanned_out_and_executed_by_a_real_worker(
    tmp_path: Path, token: str
) -> None:
    """POST /runs/batch on gunicorn, one runledger.start_runs message on a private broker, a
    real Celery worker fanning it out and executing every run."""
    import shutil

    from harness.soak import broker

    name = "redis" if shutil.which("redis-server") else "filesystem"
    with broker(name, tmp_path / "broker") as url, ApiStack(tmp_path / "s", broker_url=url) as s:
        s.worker("w1", concurrency=2)
        with rl.Client(s.url, token) as api:
            items = [
                {"agent": "refund", "inputs": {"invoice_id": f"inv_100{i}"}} for i in range(1, 7)
            ]
            runs = api.start_many(items)
            assert [r.created for r in runs] == [True] * 6
            for run in runs:
                done = api.wait(run.run_id, timeout=180)
                assert done.status == "succeeded", (done, s.log("w1"))
    assert Run.objects.filter(status="succeeded").count() == 6
