"""Hundreds of runs in flight in one process hold no more PostgreSQL connections than the
process's pool (``RUNLEDGER_DB_POOL_SIZE``): a run takes a connection per step and gives it back,
so a run waiting on its tool holds none, and the lease renewer renews them all on one. Beside
the pool the process holds one ``LISTEN`` connection while it executes runs (a cancel is heard on
it at once, ``ledger.processes.leases``): one, whatever the number of runs.

Without the connection given back after each step (``ledger.engine.pooling``), the first runs
would keep the pool's connections while they wait and the others could never reach their tool:
the "all waiting" condition below would never hold."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connection, connections

from harness.cluster import wait_for
from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.models import Run
from ledger.processes import execute

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
RUNS = 300
AGENT = "many-waiting"


class Waiting:
    """An agent whose model-like read waits on an event, as a run waits on a slow model."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.inside = 0
        self.lock = threading.Lock()

    def register(self) -> None:
        me = self

        @tool(kind="read", name="mw-think")
        def think(n: int) -> int:
            with me.lock:
                me.inside += 1
            assert me.go.wait(600)
            return n * 2

        @tool(kind="read", name="mw-after")
        def after(n: int) -> int:
            return n + 1

        @agent(AGENT, tools=[think, after])
        def body(ctx, inputs):
            doubled = ctx.call(think, step="think", n=inputs["n"])
            return ctx.call(after, step="after", n=doubled)


@pytest.fixture
def waiting() -> Iterator[Waiting]:
    if connection.vendor != "postgresql":
        pytest.skip("the pool is PostgreSQL's")
    w = Waiting()
    w.register()
    yield w
    w.go.set()
    registry.unregister_agent(AGENT)


def _backends() -> int:
    """Sessions on the test database (every one of them this process's)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND backend_type = 'client backend'"
        )
        return int(cur.fetchone()[0])


def test_hundreds_of_waiting_runs_hold_at_most_the_pools_connections(waiting) -> None:
    pool_size = connection.settings_dict["OPTIONS"]["pool"]["max_size"]
    assert pool_size < RUNS // 10
    ids = [transitions.run_start(agent=AGENT, inputs={"n": i}).run_id for i in range(RUNS)]
    connection.close()  # back to the pool: the count below is the runs' and the renewer's

    def execute_one(run_id: str) -> None:
        try:
            execute.run_execute(run_id=run_id, worker="one-process")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=execute_one, args=(r,), daemon=True) for r in ids]
    for thread in threads:
        thread.start()
    peak = 0

    def all_waiting() -> bool:
        nonlocal peak
        peak = max(peak, _backends())
        connection.close()
        return waiting.inside == RUNS

    assert wait_for(all_waiting, timeout=300, interval=0.2), f"{waiting.inside} of {RUNS} waiting"
    peak = max(peak, _backends())
    assert Run.objects.filter(pk__in=ids, status="running").count() == RUNS  # all in flight
    # The pool, and the process's one LISTEN connection that hears cancels (ledger.waiting).
    assert peak <= pool_size + 1, f"{peak} sessions for a pool of {pool_size}"
    connection.close()
    waiting.go.set()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    results = dict(Run.objects.filter(pk__in=ids).values_list("run_id", "result"))
    assert sorted(results.values()) == sorted(i * 2 + 1 for i in range(RUNS))
    assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"succeeded"}
