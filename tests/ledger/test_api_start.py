"""ledger.api.start_run: one idempotent start, a handle, and the plan stamped by the worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from ledger import api, registry
from ledger.agents import agent, tool
from ledger.models import AuditEvent, Run
from ledger.processes.execute import run_execute
from tests.support import plan_change
from tests.support.announcements import recording

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"invoice_id": "inv_1001"}


def test_a_start_writes_one_queued_run_announced_after_the_commit() -> None:
    with recording() as heard:
        with transaction.atomic():
            handle = api.start_run("refund", REFUND, idempotency_key="dispute-1", by="api:shop")
            assert heard.ids == []  # not before the commit
        assert heard.seen == [(handle.run_id, "start")]
    run = Run.objects.get()
    assert handle.created and run.run_id == handle.run_id and run.status == "queued"
    assert run.idempotency_key == "dispute-1"
    event = AuditEvent.objects.get()
    assert event.actor == "api:shop" and event.after["idempotency_key"] == "dispute-1"


def test_a_start_inside_a_transaction_that_rolls_back_leaves_nothing_and_tells_no_worker() -> None:
    with recording() as heard, pytest.raises(RuntimeError), transaction.atomic():
        api.start_run("refund", REFUND)
        raise RuntimeError("the application's own write failed")
    assert heard.ids == [] and not Run.objects.exists()


@pytest.mark.parametrize("same", ["run_id", "idempotency_key"])
def test_a_repeated_start_with_the_same_inputs_is_the_same_run(same: str) -> None:
    first = api.start_run("refund", REFUND, **{same: "dispute-2"})
    with recording() as heard:
        again = api.start_run("refund", {"invoice_id": "inv_1001"}, **{same: "dispute-2"})
    assert again.run_id == first.run_id and not again.created and first.created
    assert Run.objects.count() == 1 and heard.ids == []


@pytest.mark.parametrize("same", ["run_id", "idempotency_key"])
def test_a_repeated_start_with_other_inputs_is_a_conflict_saying_what_differs(same: str) -> None:
    first = api.start_run("refund", {"invoice_id": "inv_1001", "amount": 5}, **{same: "d-3"})
    before = list(Run.objects.values_list("run_id", "inputs"))
    with pytest.raises(api.Conflict) as refused:
        api.start_run("refund", {"invoice_id": "inv_1002", "amount": 5}, **{same: "d-3"})
    text = str(refused.value)
    assert first.run_id in text and "inputs.invoice_id" in text and '"inv_1001"' in text
    assert "amount" not in text  # only what differs
    assert refused.value.current["differs"] == ['inputs.invoice_id: "inv_1001" → "inv_1002"']
    with pytest.raises(api.Conflict, match="agent 'refund' → 'survey'"):
        api.start_run("survey", {"invoice_id": "inv_1001", "amount": 5}, **{same: "d-3"})
    assert list(Run.objects.values_list("run_id", "inputs")) == before


def test_a_run_id_and_a_key_of_two_different_runs_conflict() -> None:
    api.start_run("refund", REFUND, run_id="run-a")
    api.start_run("refund", REFUND, idempotency_key="key-b")
    with pytest.raises(api.Conflict, match="two different runs"):
        api.start_run("refund", REFUND, run_id="run-a", idempotency_key="key-b")
    assert Run.objects.count() == 2


def test_racing_identical_starts_make_one_run() -> None:
    handles: list[api.RunHandle] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        barrier.wait()
        try:
            handles.append(api.start_run("refund", REFUND, idempotency_key="race"))
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Run.objects.count() == 1 and len(handles) == 4
    assert {h.run_id for h in handles} == {Run.objects.get().run_id}
    assert sum(h.created for h in handles) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"run_id": "../etc"}, "run id"),
        ({"idempotency_key": ""}, "idempotency key"),
        ({"idempotency_key": "x" * 201}, "idempotency key"),
        ({"title": "two\nlines"}, "title"),
        ({"labels": {"a b": "c"}}, "label"),
        ({"labels": {"k": 1}}, "labels are text"),
    ],
)
def test_bad_start_values_are_refused_before_anything_is_written(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(api.InvalidInput, match=message):
        api.start_run("refund", REFUND, **kwargs)
    assert not Run.objects.exists() and not AuditEvent.objects.exists()


def test_an_unknown_agent_or_missing_required_inputs_are_refused() -> None:
    with pytest.raises(api.UnknownAgent, match="refnud"):
        api.start_run("refnud", REFUND)
    with pytest.raises(api.InvalidInput, match="needs inputs invoice_id"):
        api.start_run("refund", {})
    assert not Run.objects.exists()


def test_the_handle_waits_for_the_outcome_and_reads_the_result() -> None:
    handle = api.start_run("refund", REFUND, title="Refund for the dispute", labels={"shop": "eu"})
    assert handle.status() == "queued" and not handle.wait(timeout=0).settled
    worker = threading.Thread(target=_execute, args=(handle.run_id,))
    worker.start()
    state = handle.wait(timeout=60)
    worker.join()
    assert state.status == "succeeded" and state.settled and state.finished
    assert state.title == "Refund for the dispute"
    assert state.labels == {"invoice_id": "inv_1001", "shop": "eu"}  # declared, and the start's
    assert state.created_at <= state.started_at <= state.finished_at  # type: ignore[operator]
    assert handle.result(timeout=1) == Run.objects.get().result
    assert handle.result()["charge_id"].startswith("ch_")


def test_result_raises_for_a_run_that_stopped_for_a_person() -> None:
    handle = api.start_run("refund", REFUND)
    Run.objects.filter(pk=handle.run_id)  # read only: the cancel is a transition
    from ledger.transitions import run_cancel

    run_cancel(run_id=handle.run_id, by="api:shop", reason="customer withdrew", seen_version=None)
    with pytest.raises(api.RunCancelled, match="cancelled"):
        handle.result(timeout=5)


def _execute(run_id: str) -> None:
    from django.db import connection

    try:
        run_execute(run_id=run_id, worker="test-worker", heartbeat=False)
    finally:
        connection.close()


@pytest.fixture
def old_code() -> Iterator[str]:
    name = plan_change.register()
    yield name
    plan_change.unregister()


def test_the_worker_that_first_executes_a_run_stamps_its_own_plan(old_code: str) -> None:
    """A backend still on last week's package starts a run; the worker runs this week's code:
    the run follows the worker's plan instead of stopping as a divergence."""
    old = registry.get_agent(old_code)
    assert old is not None
    handle = api.start_run(old_code, {"who": "ada"})
    assert Run.objects.get().plan_version == ""  # the starting process's code is not recorded

    @tool(kind="read", retries=0, name="plan_change_second")
    def second() -> int:
        return 2

    @agent(old_code, divergence="refuse", plan_version="2", tools=[second], requires=("who",))
    def deployed(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        return {"second": ctx.call(second, step="c")}

    outcome = run_execute(run_id=handle.run_id, worker="new-worker", heartbeat=False)
    assert outcome is not None and outcome.status == "succeeded", outcome
    run = Run.objects.get()
    new = registry.get_agent(old_code)
    assert new is not None and new.tool_schema_hash != old.tool_schema_hash
    assert (run.plan_version, run.tool_schema_hash) == ("2", new.tool_schema_hash)


def test_start_run_command_repeated_prints_the_existing_run_not_a_traceback() -> None:
    args = ("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--run-id", "r-1")
    call_command(*args, stdout=StringIO())
    out = StringIO()
    call_command(*args, stdout=out)
    assert "run r-1: already started with these inputs (queued)" in out.getvalue()
    with pytest.raises(CommandError, match=r"inputs\.invoice_id") as refused:
        call_command(
            "start_run", "refund", "--inputs", '{"invoice_id": "inv_9"}', "--run-id", "r-1"
        )
    assert refused.value.returncode == 1 and Run.objects.count() == 1


def test_a_waiter_is_woken_by_the_commit_not_by_rereading(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the safety-net re-read pushed out of reach, only the NOTIFY of the run's settling
    commit can end the wait before its timeout."""
    from django.db import connection

    from ledger import waiting

    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    monkeypatch.setattr(waiting, "RECHECK_SECONDS", 3600.0)
    handle = api.start_run("refund", REFUND)
    worker = threading.Thread(target=_execute, args=(handle.run_id,))
    read = api.RunHandle.state

    def read_then_start_the_worker(self: api.RunHandle) -> api.RunState:
        state = read(self)
        if not worker.is_alive() and worker.ident is None:
            worker.start()  # after the waiter's first read: only a wake-up can end the wait
        return state

    monkeypatch.setattr(api.RunHandle, "state", read_then_start_the_worker)
    answers: list[api.RunState] = []
    waiter = threading.Thread(target=lambda: answers.append(handle.wait(timeout=3600)))
    waiter.daemon = True  # if no wake-up comes, it would wait the hour
    waiter.start()
    waiter.join(timeout=120)
    assert answers, "the waiter was not woken when the run settled"
    worker.join()
    assert answers[0].settled and answers[0].status == "succeeded"
