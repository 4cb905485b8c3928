"""ledger.client's start_many against the real API in this process (httpx's WSGI transport)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ledger import client as rl
from ledger.models import Run
from runs.api import tokens

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api_client() -> rl.Client:
    from django.core.wsgi import get_wsgi_application

    made = tokens.token_create(name="shop", role="operator")
    transport = httpx.WSGITransport(app=get_wsgi_application())
    return rl.Client("http://testserver", made.secret, transport=transport, backoff=0.01)


def refund(i: int, **extra: Any) -> dict[str, Any]:
    return {"agent": "refund", "inputs": {"invoice_id": f"inv_{i}"}, **extra}


def test_start_many_answers_each_run_in_order_and_a_repeat_makes_nothing(
    api_client: rl.Client,
) -> None:
    runs = api_client.start_many([refund(i, idempotency_key=f"d-{i}") for i in range(4)])
    assert [type(r) for r in runs] == [rl.Run] * 4
    assert [r.idempotency_key for r in runs] == ["d-0", "d-1", "d-2", "d-3"]
    assert all(r.created and r.status == "queued" for r in runs)
    again = api_client.start_many([refund(2, idempotency_key="d-2"), refund(9)])
    assert [r.created for r in again] == [False, True]
    assert again[0].run_id == runs[2].run_id and Run.objects.count() == 5


def test_items_without_a_key_get_one_so_a_resent_batch_is_the_same_runs(
    api_client: rl.Client,
) -> None:
    runs = api_client.start_many([refund(1), refund(2)])
    keys = [r.idempotency_key for r in runs]
    assert all(k and k.startswith("client-") for k in keys) and keys[0] != keys[1]


def test_a_refused_batch_lists_each_bad_item_and_writes_nothing(api_client: rl.Client) -> None:
    api_client.start("refund", {"invoice_id": "inv_1"}, idempotency_key="k-1")
    with pytest.raises(rl.Conflict) as conflict:
        api_client.start_many([refund(5), refund(2, idempotency_key="k-1")])
    assert [(e["index"], e["type"]) for e in conflict.value.problem["errors"]] == [(1, "conflict")]
    with pytest.raises(rl.InvalidRequest) as invalid:
        api_client.start_many([refund(5), {"agent": "nope", "inputs": {}}])
    assert invalid.value.problem["errors"][0]["index"] == 1
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([], "1 to 1000 runs; this batch has 0"),
        ([refund(i) for i in range(1001)], "this batch has 1001"),
        ({"agent": "refund"}, "a list of runs"),
        ([refund(0), "refund"], r"runs\[1\]"),
    ],
)
def test_an_empty_overlong_or_malformed_batch_is_a_value_error_before_sending(
    api_client: rl.Client, batch: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        api_client.start_many(batch)
    assert not Run.objects.exists()
