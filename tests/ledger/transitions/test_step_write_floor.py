"""The step write at the floor (issue 12, part 1): what the per-step savings must not change.

- On PostgreSQL the session plans the engine's prepared statements once (a generic plan), set
  outside any transaction so that no rollback undoes it.
- With nothing watching the connection (no execute wrappers, no query log: production) the
  statements go straight to a psycopg cursor the connection keeps; the fence, Django's error
  translation and its broken-transaction check hold there as on the wrapped path the rest of
  the suite takes (its ownership guard is an execute wrapper).
- A model call builds its tools' schemas and their hash once per tool set, the same as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import DataError, connection, connections, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import override_settings

from ledger import canonical, transitions
from ledger.engine import context
from ledger.errors import LeaseLost
from ledger.models import Step
from ledger.registry import Tool
from ledger.transitions import steps
from tests.support.ledger_writes import read_write

pg_only = pytest.mark.skipif("connection.vendor != 'postgresql'")


def _claimed_run(clock: Any) -> tuple[str, str]:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    token = transitions.lease_claim(run_id=run.run_id, owner="w", clock=clock)
    assert token
    return run.run_id, token


def _write(run_id: str, token: str, clock: Any, i: int, **changes: Any) -> int:
    write = read_write(run_id=run_id, token=token, step_id=f"s{i}", now=clock(), result_json="1")
    write.seq, write.prev_step_id = i + 1, f"s{i - 1}" if i else None
    for name, value in changes.items():
        setattr(write, name, value)
    return transitions.step_write(write)


@pytest.fixture
def unwatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The connection as production has it: no execute wrappers, no query log. The wrapped
    path fails the test if it is taken once the connection is set up."""
    connection.ensure_connection()  # a new connection gets the guard again (connection_created)
    saved = list(connection.execute_wrappers)
    connection.execute_wrappers.clear()
    try:
        with override_settings(DEBUG=False):
            yield
    finally:
        connection.execute_wrappers[:] = saved


def _forbid_wrapped_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrapped() -> Any:
        raise AssertionError("the step write took Django's wrapped cursor")

    monkeypatch.setattr(steps, "_pg_cursor", wrapped)


@pg_only
@pytest.mark.django_db(transaction=True)
def test_the_session_plans_the_engine_statements_once(clock) -> None:
    run_id, token = _claimed_run(clock)
    for i in range(8):
        _write(run_id, token, clock, i)
    with connection.cursor() as cur:
        cur.execute("SHOW plan_cache_mode")
        assert cur.fetchone()[0] == "force_generic_plan"
        cur.execute(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
            "FROM pg_prepared_statements WHERE statement LIKE 'WITH%%INSERT INTO ledger_step%%'"
        )
        generic, custom = cur.fetchone()
    assert generic >= 8 and custom == 0


@pg_only
@pytest.mark.django_db(transaction=True)
def test_the_session_setting_is_not_made_inside_a_transaction(clock) -> None:
    connection.close()  # a new connection, not yet set up (not one the pool kept, set up before)
    if connection.settings_dict["OPTIONS"].get("pool"):
        connection.close_pool()
    run_id, token = _claimed_run(clock)
    with transaction.atomic():
        _write(run_id, token, clock, 0)
        assert connections["default"].__dict__.get("_runledger_tuned") is not connection.connection
    with connection.cursor() as cur:
        cur.execute("SHOW plan_cache_mode")
        assert cur.fetchone()[0] == "auto"
    _write(run_id, token, clock, 1)  # in autocommit: now it is
    assert connections["default"].__dict__.get("_runledger_tuned") is connection.connection


@pg_only
@pytest.mark.django_db(transaction=True)
def test_an_unwatched_connection_writes_straight_through_psycopg(
    clock, unwatched, monkeypatch
) -> None:
    run_id, token = _claimed_run(clock)
    _write(run_id, token, clock, 0)  # sets the connection up (the wrapped path, once)
    _forbid_wrapped_path(monkeypatch)
    for i in range(1, 5):
        _write(run_id, token, clock, i)
    pk = _write(run_id, token, clock, 5, status="started", finished=False, kind="effect")
    transitions.step_update(
        run_id=run_id, token=token, pk=pk, status="succeeded", now=clock(), result_json="2"
    )
    rows = {s.step_id: s for s in Step.objects.filter(run_id=run_id)}
    assert len(rows) == 6
    assert [rows[f"s{i}"].next_step_id for i in range(5)] == ["s1", "s2", "s3", "s4", "s5"]
    assert rows["s5"].status == "succeeded" and rows["s5"].result == 2


@pg_only
@pytest.mark.django_db(transaction=True)
def test_the_unwatched_write_is_fenced_like_the_wrapped_one(clock, unwatched, monkeypatch) -> None:
    run_id, token = _claimed_run(clock)
    pk = _write(run_id, token, clock, 0, status="started", finished=False, kind="effect")
    _forbid_wrapped_path(monkeypatch)
    clock.advance(3600)
    assert transitions.lease_claim(run_id=run_id, owner="thief", clock=clock)
    with pytest.raises(LeaseLost):
        _write(run_id, token, clock, 1)
    with pytest.raises(LeaseLost):
        transitions.step_update(
            run_id=run_id, token=token, pk=pk, status="succeeded", now=clock(), result_json="1"
        )
    assert Step.objects.get(run_id=run_id, step_id="s0").status == "started"
    assert not Step.objects.filter(run_id=run_id, step_id="s1").exists()


@pg_only
@pytest.mark.django_db(transaction=True)
def test_the_unwatched_write_raises_django_errors(clock, unwatched, monkeypatch) -> None:
    run_id, token = _claimed_run(clock)
    _write(run_id, token, clock, 0)
    _forbid_wrapped_path(monkeypatch)
    with pytest.raises(DataError):  # Django's error (LedgerUnavailable catches DatabaseError)
        _write(run_id, token, clock, 1, input_hash="x" * 65)
    assert connection.errors_occurred is False  # a data error leaves the connection usable
    monkeypatch.undo()
    with transaction.atomic():
        transaction.set_rollback(True)  # a broken atomic block: Django's check refuses the write
        with pytest.raises(TransactionManagementError):
            _write(run_id, token, clock, 1)
    _write(run_id, token, clock, 1)
    assert Step.objects.filter(run_id=run_id).count() == 2


def _tool(name: str, doc: str = "") -> Tool:
    def fn(query: str, limit: int = 3) -> dict[str, Any]:
        return {}

    return Tool(name=name, kind="read", fn=fn, description=doc)


@pytest.mark.sqlite_ok
def test_tool_schemas_are_built_once_per_tool_set_and_hash_as_before(monkeypatch) -> None:
    tools = (_tool("search"), _tool("lookup", "finds"))
    expected = [t.schema() for t in tools]
    expected_hash = canonical.hash_text(canonical.dumps(canonical.normalize(expected)))
    built: list[str] = []
    original = Tool.schema

    def counting(self: Tool) -> dict[str, Any]:
        built.append(self.name)
        return original(self)

    monkeypatch.setattr(Tool, "schema", counting)
    context._tool_schema.cache_clear()
    for _ in range(3):
        schema, schema_hash = context._schemas(tools)
        assert schema == expected and schema_hash == expected_hash
    assert built == ["search", "lookup"]
    other, other_hash = context._schemas((tools[1],))  # another set: its own schemas and hash
    assert other == expected[1:] and other_hash != expected_hash


@pytest.mark.sqlite_ok
def test_stored_inputs_keep_their_truncation_rule() -> None:
    with override_settings(RUNLEDGER_MAX_STORED_INPUT_BYTES=1000):
        short = canonical.dumps({"x": "é" * 100})  # 200 bytes in UTF-8, under 4 per character
        assert steps.stored_inputs(short) == (short, False)
        exact = canonical.dumps({"x": "é" * 496})  # 1000 bytes, 504 characters
        assert len(exact.encode()) == 1000 and steps.stored_inputs(exact) == (exact, False)
        text, truncated = steps.stored_inputs(canonical.dumps({"x": "é" * 497}))
        assert truncated and canonical.loads(text)["bytes"] == 1002
