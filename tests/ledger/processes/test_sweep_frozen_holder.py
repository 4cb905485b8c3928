"""Recovery never waits on a frozen process: a real process that took one of the locks the sweep
needs (a run row, the sweep's beacon, the status totals, the trend totals, the search words) in
an open transaction and was then frozen with SIGSTOP. Another sweep still recovers every run it
can at once, skips what the frozen one holds, and recovers that too once the holder is gone.

Without the bounded waits (``RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS``, SKIP LOCKED) the sweep waits
until the frozen process wakes: here never (its session has no idle timeout), so the sweep's
thread is still running at the generous bound below and the test fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.db import connection, connections

from ledger import transitions
from ledger.models import Run
from ledger.processes import sweep
from ledger.transitions import counts, trends

pytestmark = [pytest.mark.django_db(transaction=True)]
BOUND = 60.0  # the frozen holder never wakes: a sweep that waits on it never returns

#: Holds a lock in an open transaction: prints "held", then waits (frozen by the test).
HOLDER = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1])
conn.execute("SET idle_in_transaction_session_timeout = 0")  # frozen for good, as in the issue
with conn.transaction():
    cur = conn.execute(sys.argv[2], prepare=False)
    print("held", flush=True)
    sys.stdin.read()
"""


def _conninfo() -> str:
    sd = connection.settings_dict
    return psycopg_conninfo(sd)


def psycopg_conninfo(sd: dict) -> str:
    parts = {"dbname": sd["NAME"], "user": sd["USER"], "host": sd["HOST"], "port": sd["PORT"]}
    if sd.get("PASSWORD"):
        parts["password"] = sd["PASSWORD"]
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


@pytest.fixture
def frozen_holder() -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    """Start a process that runs ``sql`` in an open transaction, then SIGSTOP it."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and lock_timeout are PostgreSQL's")
    started: list[subprocess.Popen[str]] = []

    def hold(sql: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, _conninfo(), sql],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        os.kill(proc.pid, signal.SIGSTOP)
        return proc

    yield hold
    for proc in started:
        proc.kill()  # its session ends: the server releases its locks
        proc.wait(timeout=30)


def _expired_runs(clock, n: int) -> list[str]:
    ids = []
    for i in range(n):
        run = transitions.run_start(agent="refund", inputs={"invoice_id": f"inv_{i}"}, clock=clock)
        assert transitions.lease_claim(run_id=run.run_id, owner="frozen-worker", clock=clock)
        ids.append(run.run_id)
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    return ids


def _sweep_in_thread(clock) -> list[str]:
    """One sweep pass on a thread of its own; its result, or a failure if it is still waiting
    at the bound (it waits on the frozen process)."""
    out: list[list[str]] = []

    def work() -> None:
        try:
            out.append(sweep.runs_sweep(clock=clock))
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the sweep is waiting on a lock the frozen process holds"
    assert out, "the sweep failed"
    return out[0]


@pytest.mark.parametrize(
    "lock",
    ["beacon", "status totals", "trend totals"],
)
def test_a_frozen_holder_of_a_shared_lock_does_not_stop_the_sweep(
    clock, frozen_holder, lock
) -> None:
    ids = _expired_runs(clock, 3)
    sweep.runs_sweep(clock=clock)  # the beacon and the totals rows exist, as in production
    Run.objects.filter(pk__in=ids).update(status="running")  # expired again for this pass
    sql = {
        "beacon": "UPDATE ledger_beacon SET at = now() WHERE name = 'sweep'",
        "status totals": counts.FOLD,
        "trend totals": trends.FOLD,
    }[lock]
    frozen_holder(sql)
    assert sorted(_sweep_in_thread(clock)) == sorted(ids)
    assert set(Run.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"queued"}


def test_a_frozen_worker_holding_a_run_row_delays_only_that_run(clock, frozen_holder) -> None:
    ids = _expired_runs(clock, 3)
    held = ids[0]
    # As a fenced step write holds it (FOR SHARE), frozen in the middle of its transaction.
    holder = frozen_holder(f"SELECT 1 FROM ledger_run WHERE run_id = '{held}' FOR SHARE")
    assert sorted(_sweep_in_thread(clock)) == sorted(ids[1:])
    assert Run.objects.get(pk=held).status == "running"
    holder.kill()  # the frozen process is gone (or its idle_in_transaction timeout ended it)
    holder.wait(timeout=30)
    assert _sweep_in_thread(clock) == [held]
    assert Run.objects.get(pk=held).status == "queued"
