"""Batched durability (``@agent(durability="batched")``, ``ledger.engine.batch``).

Read, model and clock steps commit together; the invariant these tests hold the engine to:
no effect is sent unless every step before it is durable (committed, visible to another
connection), and a crash loses only the steps that waited, which the resume executes again —
with the same final result and the same chain as a run that never crashed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created

from harness import faults
from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.engine import batch as batch_module
from ledger.errors import AgentDefinitionError
from ledger.examples.models import OutboxMessage
from ledger.models import Run, Step

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

#: What each read saw, and how many rows of its run were durable when each effect was sent.
reads: list[int] = []
durable_at_send: list[int] = []
durable_during_reads: list[int] = []
look_at = {2}  # the reads that look at what is durable while they run
#: A look that expects a batch handed to the flusher thread waits (up to a minute) for this
#: many committed rows: a condition, not a timing.
expect_rows: list[int] = []


def _durable_rows(run_id: str) -> int:
    """Succeeded rows of the run as another connection sees them: only committed rows."""
    if connection.vendor != "postgresql":
        return Step.objects.filter(run_id=run_id, status="succeeded").count()
    seen: list[int] = []

    def look() -> None:
        try:
            seen.append(Step.objects.filter(run_id=run_id, status="succeeded").count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join()
    return seen[0]


@tool(kind="read", name="batched-read")
def read_value(i: int, run_id: str) -> dict[str, int]:
    reads.append(i)
    if i in look_at:
        seen = _durable_rows(run_id)
        deadline = time.monotonic() + 60
        while expect_rows and seen < expect_rows[0] and time.monotonic() < deadline:
            time.sleep(0.01)
            seen = _durable_rows(run_id)
        durable_during_reads.append(seen)
    faults.point("batched.read")
    return {"i": i, "square": i * i}


@tool(kind="effect", name="batched-send")
def send(total: int, run_id: str, *, idempotency_key: str) -> dict[str, Any]:
    durable_at_send.append(_durable_rows(run_id))
    OutboxMessage.objects.create(
        message_id=idempotency_key, to="ops@example.com", subject="total", body=str(total)
    )
    return {"message_id": idempotency_key}


def _body(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    total = 0
    for i in range(int(inputs["reads"])):
        total += ctx.call(read_value, step=f"r{i}", i=i, run_id=ctx.run_id)["square"]
        if i % 5 == 4:
            ctx.now(step=f"t{i}")
    sent = ctx.call(send, step="send", total=total, run_id=ctx.run_id)
    after = [ctx.call(read_value, step=f"after{i}", i=100 + i, run_id=ctx.run_id) for i in range(3)]
    return {"total": total, "sent": sent["message_id"], "after": [a["i"] for a in after]}


batched = agent("batched-sum", tools=[read_value, send], durability="batched", batch_steps=8)(_body)
stepwise = agent("stepwise-sum", tools=[read_value, send])(_body)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    reads.clear()
    durable_at_send.clear()
    durable_during_reads.clear()
    look_at.clear()
    look_at.add(2)
    expect_rows.clear()
    yield
    faults.clear_hooks()


def _chain(run_id: str) -> list[tuple[str, str | None, str]]:
    rows = Step.objects.filter(run_id=run_id).order_by("seq")
    return [(s.step_id, s.next_step_id, s.status) for s in rows]


def _start(name: str, reads_: int = 20, run_id: str | None = None) -> Run:
    return transitions.run_start(agent=name, inputs={"reads": reads_}, run_id=run_id)


def test_steps_wait_then_commit_with_the_effect_intent_and_every_one_is_durable_at_send(
    execute,
) -> None:
    look_at.add(100)
    run = _start("batched-sum", 6)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded"
    # While the third read ran, nothing of the run was committed (the batch really waits);
    # when the effect was sent, all 6 reads and the clock reading were; the effect's result
    # was committed at once, before the next read (an effect's rows never wait).
    assert durable_during_reads == [0, 8]
    assert durable_at_send == [7]
    sent = Step.objects.get(run_id=run.run_id, step_id="send")
    assert sent.effect_key == f"{run.run_id}:send" and sent.kind == "effect"
    chain = _chain(run.run_id)
    ids = ["r0", "r1", "r2", "r3", "r4", "t4", "r5", "send", "after0", "after1", "after2"]
    assert [c[0] for c in chain] == ids
    assert [c[1] for c in chain] == [*ids[1:], None]
    assert all(c[2] == "succeeded" for c in chain)
    assert OutboxMessage.objects.filter(message_id=f"{run.run_id}:send").count() == 1


def test_the_batched_ledger_equals_the_stepwise_one(execute) -> None:
    """Same rows, same links, same results, same inputs as one commit per step."""
    one = _start("batched-sum", 20)
    two = _start("stepwise-sum", 20)
    assert execute(one.run_id).status == execute(two.run_id).status == "succeeded"
    fields = ("step_id", "next_step_id", "status", "inputs", "kind", "tool", "seq", "attempt")

    def rows(run_id: str) -> list[tuple[Any, ...]]:
        return [
            (*(getattr(s, f) for f in fields), s.result if s.kind != "clock" else None)
            for s in Step.objects.filter(run_id=run_id).order_by("seq")
        ]

    def same(run: Run, values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [tuple(str(v).replace(run.run_id, "<run>") for v in row) for row in values]

    assert same(one, rows(one.run_id)) == same(two, rows(two.run_id))


def _crash_at_call(crash_at: Any, n: int) -> None:
    """The process dies (conftest's Crash) at the n-th read, once."""
    crash_at("batched.read")
    crash = faults._hooks["batched.read"]  # raises conftest's Crash the first time it runs
    calls = [0]

    def nth() -> None:
        calls[0] += 1
        if calls[0] == n:
            crash()

    faults.set_hook("batched.read", nth)


def test_a_full_batch_commits_without_waiting_for_an_effect(execute, crash_at) -> None:
    """batch_steps=8: a crash at the 13th read finds the first 8 steps committed, no more."""
    _crash_at_call(crash_at, 13)
    run = _start("batched-sum", 20)
    execute(run.run_id, crash_expected=True)
    chain = _chain(run.run_id)
    # r0..r4, t4, r5, r6 are the first 8 steps: they were committed as one batch.
    assert [c[0] for c in chain] == ["r0", "r1", "r2", "r3", "r4", "t4", "r5", "r6"]
    assert chain[-1][1] is None  # the link to r7 waited with r7, and was lost with it
    assert durable_at_send == []


def test_a_crash_loses_only_waiting_reads_and_the_resume_ends_as_if_nothing_happened(
    execute, crash_at
) -> None:
    clean = _start("batched-sum", 20)
    expected = execute(clean.run_id).result
    reads.clear()
    _crash_at_call(crash_at, 17)
    run = _start("batched-sum", 20)
    execute(run.run_id, crash_expected=True)
    durable = {c[0] for c in _chain(run.run_id)}
    assert len(durable) == 16  # two full batches of 8
    before = {s.step_id: s.result for s in Step.objects.filter(run_id=run.run_id)}
    reads.clear()
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded"
    assert outcome.replayed == 16
    # Only what waited ran again: r14, t14, r15 (the lost batch) and r16, where it died.
    assert reads == [14, 15, 16, 17, 18, 19, 100, 101, 102]
    after = {s.step_id: s.result for s in Step.objects.filter(run_id=run.run_id)}
    assert all(after[k] == v for k, v in before.items())
    normal = {**outcome.result, "sent": outcome.result["sent"].replace(run.run_id, "<run>")}
    assert normal == {**expected, "sent": expected["sent"].replace(clean.run_id, "<run>")}
    assert OutboxMessage.objects.filter(message_id=f"{run.run_id}:send").count() == 1
    ids = [c[0] for c in _chain(run.run_id)]
    assert [c[1] for c in _chain(run.run_id)] == [*ids[1:], None]


def test_the_time_bound_commits_an_old_batch_at_the_next_step(execute, monkeypatch) -> None:
    """The oldest waiting row past batch_ms: the batch commits when the next step comes."""
    now = [1000.0]
    monkeypatch.setattr(batch_module, "_monotonic", lambda: now[0])  # the bound's clock only

    def tick() -> None:
        now[0] += 0.150  # each read "takes" 150 ms of the bound's clock

    faults.set_hook("batched.read", tick)
    agent("batched-timed", tools=[read_value, send], durability="batched", batch_ms=200)(_body)
    try:
        look_at.clear()
        look_at.add(3)
        expect_rows.append(3)
        run = _start("batched-timed", 4)
        assert execute(run.run_id).status == "succeeded"
    finally:
        registry.unregister_agent("batched-timed")
    # r0 waits from t=1000.15; r1 is added at 1000.30 (150 ms after r0: not due); r2 at
    # 1000.45, 300 ms after r0: due, the three commit. r3 sees them; batch_steps (100) was
    # never reached and no effect came between.
    assert durable_during_reads == [3]
    assert durable_at_send == [4]


def test_the_count_of_statements_one_per_batch(execute) -> None:
    """40 reads with batch_steps=8 write the ledger in 5 statements (plus the finish)."""
    agent("batched-many", tools=[read_value], durability="batched", batch_steps=8)(_reads_only)
    try:
        run = transitions.run_start(agent="batched-many", inputs={"reads": 40})
        sent: list[str] = []

        def seen(execute_: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            sent.append(sql)
            return execute_(sql, params, many, context)

        def attach(sender: Any, connection: Any, **kwargs: Any) -> None:
            # The flusher's thread opens its own; with the pool a thread's connection is
            # "created" again at each checkout: count each statement once.
            if seen not in connection.execute_wrappers:
                connection.execute_wrappers.append(seen)

        connection_created.connect(attach, dispatch_uid="batched-count")
        try:
            with connection.execute_wrapper(seen):
                assert execute(run.run_id).status == "succeeded"
        finally:
            connection_created.disconnect(dispatch_uid="batched-count")
    finally:
        registry.unregister_agent("batched-many")
    writes = [sql for sql in sent if "INSERT INTO ledger_step" in sql]
    expected = 5 if connection.vendor == "postgresql" else 40  # SQLite: one INSERT per row
    assert len(writes) == expected
    assert Step.objects.filter(run_id=run.run_id, status="succeeded").count() == 40


def _reads_only(ctx: Any, inputs: dict[str, Any]) -> int:
    return sum(
        ctx.call(read_value, step=f"r{i}", i=i, run_id=ctx.run_id)["i"]
        for i in range(int(inputs["reads"]))
    )


def test_steps_that_waited_commit_with_a_failed_run(execute) -> None:
    def fails_after_reads(ctx: Any, inputs: dict[str, Any]) -> None:
        for i in range(3):
            ctx.call(read_value, step=f"r{i}", i=i, run_id=ctx.run_id)
        raise ValueError("the agent's own bug")

    agent("batched-fails", tools=[read_value], durability="batched")(fails_after_reads)
    try:
        run = transitions.run_start(agent="batched-fails", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("batched-fails")
    assert outcome.status == "failed"
    assert [c[0] for c in _chain(run.run_id)] == ["r0", "r1", "r2"]


flaky_calls: list[int] = []


@tool(kind="read", name="batched-flaky", retries=2)
def flaky(i: int) -> int:
    flaky_calls.append(i)
    if len(flaky_calls) == 1:
        raise ConnectionError("the first try times out")
    return i


def test_a_failed_attempt_commits_what_waited_before_its_own_row(execute) -> None:
    def body(ctx: Any, inputs: dict[str, Any]) -> int:
        a = ctx.call(read_value, step="a", i=1, run_id=ctx.run_id)["i"]
        b = ctx.call(flaky, step="b", i=2)
        c = ctx.call(read_value, step="c", i=3, run_id=ctx.run_id)["i"]
        return a + b + c

    flaky_calls.clear()
    agent("batched-flaky", tools=[read_value, flaky], durability="batched")(body)
    try:
        run = transitions.run_start(agent="batched-flaky", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("batched-flaky")
    assert outcome.status == "succeeded" and outcome.result == 6
    chain = _chain(run.run_id)
    assert chain == [("a", "b", "succeeded"), ("b", "c", "succeeded"), ("c", None, "succeeded")]
    assert Step.objects.get(run_id=run.run_id, step_id="b").attempt == 2


@pytest.mark.django_db(transaction=True)
def test_a_batch_whose_lease_was_taken_over_writes_nothing(execute, clock) -> None:
    """A worker that lost its lease while its steps waited: the batch is refused whole."""
    taken: list[bool] = []

    def take_over() -> None:
        if len(reads) == 3 and not taken:
            taken.append(True)
            clock.advance(3600)
            assert transitions.lease_claim(run_id=run.run_id, owner="usurper", clock=clock)

    faults.set_hook("batched.read", take_over)
    run = _start("batched-sum", 6)
    assert execute(run.run_id) is None  # LeaseLost: the execution stops, writing nothing
    assert Step.objects.filter(run_id=run.run_id).count() == 0
    assert durable_at_send == []
    assert Run.objects.get(pk=run.run_id).lease_owner == "usurper"


def test_bad_batch_settings_are_refused_at_registration() -> None:
    with pytest.raises(AgentDefinitionError, match="durability"):
        agent("x-bad", durability="sometimes")(_body)  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="batch_steps"):
        agent("x-bad", durability="batched", batch_steps=0)(_body)
    with pytest.raises(AgentDefinitionError, match="batch_ms"):
        agent("x-bad", durability="batched", batch_ms=-1)(_body)
    assert registry.get_agent("x-bad") is None


def test_worker_outcome_counts_batched_steps_as_executed(execute) -> None:
    run = _start("batched-sum", 4)
    outcome = execute(run.run_id)
    assert outcome.executed == 4 + 1 + 3  # reads, the effect, reads after
    assert outcome.replayed == 0


def test_a_batch_committing_on_the_flusher_when_the_lease_is_taken_stops_the_execution(
    execute, clock
) -> None:
    """batch_steps=2: batches go to the flusher's thread (PostgreSQL) while reads go on. A
    takeover at the 3rd read refuses the batch in flight or the next one; the execution stops
    before the effect, and the ledger holds a whole batch or nothing of it."""
    taken: list[bool] = []

    def take_over() -> None:
        if len(reads) == 3 and not taken:
            taken.append(True)
            clock.advance(3600)
            assert transitions.lease_claim(run_id=run.run_id, owner="usurper", clock=clock)

    faults.set_hook("batched.read", take_over)
    agent("batched-pairs", tools=[read_value, send], durability="batched", batch_steps=2)(_body)
    try:
        run = _start("batched-pairs", 6)
        assert execute(run.run_id) is None
    finally:
        registry.unregister_agent("batched-pairs")
    assert durable_at_send == []
    assert [c[0] for c in _chain(run.run_id)] in ([], ["r0", "r1"])
    assert Run.objects.get(pk=run.run_id).lease_owner == "usurper"


def test_a_batch_reports_its_rows_by_kind_in_one_event_each(execute) -> None:
    """Metrics count every row a batch wrote (one event per kind, with its count)."""
    from ledger import observe

    seen: list[tuple[str, int]] = []

    def watch(event: str, fields: Any) -> None:
        if event == "step_written":
            seen.append((fields["kind"], fields.get("count", 1)))

    observe.subscribe(watch)
    try:
        run = _start("batched-sum", 10)
        assert execute(run.run_id).status == "succeeded"
    finally:
        observe.unsubscribe(watch)
    counted: dict[str, int] = {}
    for kind, count in seen:
        counted[kind] = counted.get(kind, 0) + count
    rows = Step.objects.filter(run_id=run.run_id)
    assert counted["read"] == rows.filter(kind="read").count() == 13
    assert counted["clock"] == rows.filter(kind="clock").count() == 2
    assert ("read", 1) not in seen[:1]  # the first batch came as one event, not row by row
