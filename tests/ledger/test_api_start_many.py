"""ledger.api.start_runs: many runs in one transaction and one announcement, each item with its
own idempotency key and the conflict rules of a single start; one bad item refuses the batch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from ledger import api, signals
from ledger.models import AuditEvent, Run, WebhookSubscription
from tests.support.announcements import recording

pytestmark = pytest.mark.django_db(transaction=True)


def refund(i: int, **extra: Any) -> dict[str, Any]:
    return {"agent": "refund", "inputs": {"invoice_id": f"inv_{i}"}, **extra}


@pytest.fixture
def batches() -> Iterator[list[tuple[list[str], str]]]:
    """Each ``runs_queued`` announcement: (run ids, cause)."""
    heard: list[tuple[list[str], str]] = []

    def receive(sender: Any, run_ids: list[str], cause: str, **kwargs: Any) -> None:
        heard.append((list(run_ids), cause))

    signals.runs_queued.connect(receive, dispatch_uid="test-batches")
    try:
        yield heard
    finally:
        signals.runs_queued.disconnect(dispatch_uid="test-batches")


def test_a_batch_writes_its_runs_in_one_transaction_announced_once_after_the_commit(
    batches,
) -> None:
    items = [refund(i, idempotency_key=f"d-{i}", title=f"refund {i}") for i in range(5)]
    with recording() as heard:
        with transaction.atomic():
            handles = api.start_runs(items, by="api:shop")
            assert heard.ids == [] and batches == []  # not before the commit
        ids = [h.run_id for h in handles]
        assert batches == [(ids, "start")]
        assert heard.seen == [(run_id, "start") for run_id in ids]  # each run, still
    assert all(h.created for h in handles)
    runs = {r.run_id: r for r in Run.objects.all()}
    assert set(runs) == set(ids)
    for i, run_id in enumerate(ids):
        run = runs[run_id]
        assert (run.status, run.idempotency_key, run.title) == ("queued", f"d-{i}", f"refund {i}")
        assert run.inputs == {"invoice_id": f"inv_{i}"}
    audited = AuditEvent.objects.filter(action="run_start", actor="api:shop")
    assert sorted(audited.values_list("run_id", flat=True)) == sorted(ids)


def test_a_batch_in_a_transaction_that_rolls_back_leaves_nothing_and_tells_no_worker(
    batches,
) -> None:
    with recording() as heard, pytest.raises(RuntimeError), transaction.atomic():
        api.start_runs([refund(1), refund(2)])
        raise RuntimeError("the application's own write failed")
    assert heard.ids == [] and batches == [] and not Run.objects.exists()


def test_a_repeated_batch_answers_the_same_runs_and_a_mixed_one_says_which_it_made(
    batches,
) -> None:
    first = api.start_runs([refund(i, idempotency_key=f"d-{i}") for i in range(3)])
    batches.clear()
    again = api.start_runs([refund(i, idempotency_key=f"d-{i}") for i in range(3)])
    assert [h.run_id for h in again] == [h.run_id for h in first]
    assert [h.created for h in again] == [False, False, False]
    assert batches == [] and Run.objects.count() == 3  # nothing new, nothing announced

    mixed = api.start_runs(
        [refund(1, idempotency_key="d-1"), refund(7, idempotency_key="d-7"), refund(8)]
    )
    assert [h.created for h in mixed] == [False, True, True]
    assert mixed[0].run_id == first[1].run_id
    assert batches == [([mixed[1].run_id, mixed[2].run_id], "start")]
    assert Run.objects.count() == 5


def test_a_key_used_before_with_other_inputs_refuses_the_whole_batch(batches) -> None:
    earlier = api.start_run("refund", {"invoice_id": "inv_1"}, idempotency_key="d-1")
    before = set(Run.objects.values_list("run_id", flat=True))
    with pytest.raises(api.BatchRefused) as refused:
        api.start_runs(
            [refund(5, idempotency_key="d-5"), refund(2, idempotency_key="d-1"), refund(6)]
        )
    (error,) = refused.value.errors
    assert (error.index, error.kind) == (1, "conflict") and refused.value.conflicts_only
    assert earlier.run_id in error.message and "inputs.invoice_id" in error.message
    assert error.current["differs"] == ['inputs.invoice_id: "inv_1" → "inv_2"']
    assert set(Run.objects.values_list("run_id", flat=True)) == before  # d-5 and inv_6 too
    assert batches == []


def test_items_of_one_batch_are_judged_in_order_as_single_starts_would_be() -> None:
    same = api.start_runs([refund(1, idempotency_key="k"), refund(1, idempotency_key="k")])
    assert same[0].run_id == same[1].run_id and [h.created for h in same] == [True, False]
    assert Run.objects.count() == 1

    with pytest.raises(api.BatchRefused) as refused:
        api.start_runs([refund(3, run_id="run-x"), refund(4, run_id="run-x")])
    assert [(e.index, e.kind) for e in refused.value.errors] == [(1, "conflict")]
    assert "run id" in refused.value.errors[0].message
    assert Run.objects.count() == 1


def test_every_bad_item_is_listed_and_nothing_is_written() -> None:
    items: list[Any] = [
        refund(0),
        {"agent": "no-such-agent", "inputs": {}},
        {"agent": "refund", "inputs": {}},  # misses invoice_id
        refund(3, colour="red"),
        refund(4, title="two\nlines"),
        "not a run",
        refund(6, run_id="has spaces"),
        refund(7, webhooks=[{"url": "ftp://nowhere"}]),
        refund(8, max_resumes=-1),
        {"agent": "refund", "inputs": {"invoice_id": float("nan")}},
    ]
    with pytest.raises(api.BatchRefused) as refused:
        api.start_runs(items)
    kinds = {e.index: e.kind for e in refused.value.errors}
    assert kinds == {
        1: "unknown-agent",
        2: "invalid",
        3: "invalid",
        4: "invalid",
        5: "invalid",
        6: "invalid",
        7: "invalid",
        8: "invalid",
        9: "invalid",
    }
    assert not refused.value.conflicts_only
    assert isinstance(refused.value, ValueError)
    text = str(refused.value)
    assert "9 of the batch's runs cannot start, so none was started" in text
    assert "runs[1]: no agent named 'no-such-agent'" in text
    assert not Run.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([], "at least one run"),
        ([refund(i) for i in range(1001)], "at most 1000 runs; this one has 1001"),
        ("refund", "a list of runs"),
        ({"agent": "refund"}, "a list of runs"),
        (None, "a list of runs"),
    ],
)
def test_an_empty_overlong_or_malformed_batch_is_refused(batch: Any, message: str) -> None:
    with pytest.raises(api.InvalidInput, match=message) as refused:
        api.start_runs(batch)
    assert isinstance(refused.value, ValueError)
    assert not Run.objects.exists()


def test_a_thousand_runs_start_in_one_batch_with_their_webhooks(batches) -> None:
    items = [refund(i, idempotency_key=f"bulk-{i}") for i in range(1000)]
    items[10]["webhooks"] = [{"url": "https://shop.example/hooks", "events": ["run.succeeded"]}]
    handles = api.start_runs(items, by="api:shop")
    assert len(handles) == 1000 and all(h.created for h in handles)
    assert Run.objects.filter(status="queued").count() == 1000
    assert len(batches) == 1 and batches[0][0] == [h.run_id for h in handles]
    (made,) = handles[10].subscriptions
    assert made[1].startswith("whsec_")
    sub = WebhookSubscription.objects.get()
    assert sub.run_id == handles[10].run_id and sub.events == ["run.succeeded"]


def test_racing_batches_with_shared_keys_make_each_run_once() -> None:
    """Four batches of 200 sharing half their keys, released at once: the inserts of the later
    ones wait on the first's keys, fail on them, and are judged again as repeats."""
    answers: list[list[api.RunHandle]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start(offset: int) -> None:
        from django.db import connection

        barrier.wait()
        try:
            answers.append(
                api.start_runs(
                    [refund(i, idempotency_key=f"r-{i}") for i in range(offset, offset + 200)]
                )
            )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start, args=(k * 100,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(answers) == 4
    runs = dict(Run.objects.values_list("idempotency_key", "run_id"))
    assert len(runs) == 500
    for handles in answers:
        for h in handles:
            assert runs[Run.objects.get(pk=h.run_id).idempotency_key] == h.run_id
    assert sum(h.created for handles in answers for h in handles) == 500
