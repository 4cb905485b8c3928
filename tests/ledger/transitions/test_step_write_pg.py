"""The PostgreSQL step write after issue 12: prepared once per connection, the previous row
linked in place by its unique key, and ledger_step without the indexes the unique one covers
(every step query of the dashboard and the engine still served by an index: EXPLAIN)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import override_settings

from ledger import selectors, transitions
from ledger.models import Step
from tests.support.ledger_writes import read_write

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def _claimed_run(clock: Any) -> tuple[str, str]:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    token = transitions.lease_claim(run_id=run.run_id, owner="w", clock=clock)
    assert token
    return run.run_id, token


def _write_chain(run_id: str, token: str, clock: Any, n: int) -> None:
    for i in range(n):
        write = read_write(
            run_id=run_id, token=token, step_id=f"s{i}", now=clock(), result_json=str(i)
        )
        write.seq, write.prev_step_id = i + 1, f"s{i - 1}" if i else None
        transitions.step_write(write)
        clock.advance(1)


def _engine_statement_runs() -> int:
    """Executions of the engine's step upsert as a prepared statement on this connection."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH%%INSERT INTO ledger_step%%'"
        )
        return int(cur.fetchone()[0])


def test_the_step_write_is_prepared_once_and_then_executed_by_name(clock) -> None:
    run_id, token = _claimed_run(clock)
    before = _engine_statement_runs()
    _write_chain(run_id, token, clock, 8)
    assert _engine_statement_runs() - before == 8
    assert Step.objects.filter(run_id=run_id).count() == 8


def test_with_preparing_off_the_write_is_not_prepared(clock) -> None:
    run_id, token = _claimed_run(clock)
    before = _engine_statement_runs()
    with override_settings(RUNLEDGER_PG_PREPARE=False):
        _write_chain(run_id, token, clock, 3)
    assert _engine_statement_runs() == before
    assert Step.objects.filter(run_id=run_id).count() == 3


def test_linking_a_step_sets_next_step_id_and_version_and_keeps_its_time(clock) -> None:
    run_id, token = _claimed_run(clock)
    _write_chain(run_id, token, clock, 1)
    first = Step.objects.get(run_id=run_id, step_id="s0")
    clock.advance(30)
    write = read_write(run_id=run_id, token=token, step_id="s1", now=clock(), result_json="1")
    write.seq, write.prev_step_id = 2, "s0"
    transitions.step_write(write)
    linked = Step.objects.get(run_id=run_id, step_id="s0")
    assert linked.next_step_id == "s1"
    assert linked.version == first.version + 1
    assert linked.updated_at == first.updated_at  # its own outcome's time, not the link's


def test_a_takeover_between_steps_still_fences_the_linking_write(clock) -> None:
    run_id, token = _claimed_run(clock)
    _write_chain(run_id, token, clock, 2)
    clock.advance(3600)
    assert transitions.lease_claim(run_id=run_id, owner="thief", clock=clock)
    write = read_write(run_id=run_id, token=token, step_id="s2", now=clock(), result_json="2")
    write.seq, write.prev_step_id = 3, "s1"
    from ledger.errors import LeaseLost

    with pytest.raises(LeaseLost):
        transitions.step_write(write)
    assert Step.objects.get(run_id=run_id, step_id="s1").next_step_id is None
    assert not Step.objects.filter(run_id=run_id, step_id="s2").exists()


def test_ledger_step_has_no_index_the_unique_one_covers() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'ledger_step'")
        names = {r[0] for r in cur.fetchall()}
    # step_run_model and step_model_usage (Trends' tokens and cost) are partial: only model
    # steps (seconds-long calls) maintain them.
    assert names == {"ledger_step_pkey", "step_unique_per_run", "step_run_seq",
                     "step_started_effects", "step_run_model", "step_model_usage"}  # fmt: skip


def _plan(sql: str, params: list[Any]) -> str:
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off")  # the test tables are tiny: ask for the index
        try:
            cur.execute("EXPLAIN " + sql, params)
            return "\n".join(r[0] for r in cur.fetchall())
        finally:
            cur.execute("RESET enable_seqscan")


def _queries_of(run_id: str) -> list[tuple[str, list[Any]]]:
    """The step queries the engine and the dashboard send, as Django compiles them."""
    querysets = [
        Step.objects.filter(run_id=run_id).order_by("seq").values_list("pk", "step_id"),
        Step.objects.filter(run_id=run_id, pk__in=[1, 2, 3]),
        Step.objects.filter(run_id=run_id).order_by("seq", "pk"),
        selectors.settlement_queue_steps(),
    ]
    compiled = [qs.query.sql_with_params() for qs in querysets]
    load = ("SELECT * FROM ledger_step WHERE run_id = %s", [run_id])  # load_steps
    return [load, *[(sql, list(params)) for sql, params in compiled]]


def test_every_step_query_is_served_by_an_index_without_the_dropped_ones(clock) -> None:
    run_id, token = _claimed_run(clock)
    _write_chain(run_id, token, clock, 5)
    with connection.cursor() as cur:
        cur.execute("ANALYZE ledger_step")
    for sql, params in _queries_of(run_id):
        plan = _plan(sql, params)
        assert "Seq Scan on ledger_step" not in plan, plan
        assert "ledger_step_run_id" not in plan, plan
