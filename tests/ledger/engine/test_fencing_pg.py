"""Fencing under real concurrency on PostgreSQL: a takeover cannot slip between check and write."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, connections

from ledger import transitions
from ledger.errors import LeaseLost
from ledger.models import Run, Step
from tests.support.ledger_writes import read_write, wait_for_lock_waiters

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_takeover_waits_for_an_in_flight_write_and_then_wins(clock) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    token = transitions.lease_claim(run_id=run.run_id, owner="a", clock=clock)
    assert token
    write = read_write(run_id=run.run_id, token=token, step_id="s1", now=clock(), result_json="1")
    results: dict[str, object] = {}
    with connection.cursor() as cur:
        cur.execute("BEGIN")
        transitions.step_write(write)  # holds the run row FOR SHARE until COMMIT

        def take_over() -> None:
            clock.advance(60)
            Run.objects.filter(pk=run.run_id).update(lease_token="thief")
            results["done"] = True
            connections.close_all()

        thief = threading.Thread(target=take_over)
        thief.start()
        wait_for_lock_waiters(1)  # the takeover queues behind the share lock
        assert "done" not in results
        cur.execute("COMMIT")
    thief.join(timeout=120)
    assert results.get("done")
    assert Step.objects.filter(run_id=run.run_id, step_id="s1").exists()
    write.step_id = "s2"
    with pytest.raises(LeaseLost):
        transitions.step_write(write)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_concurrent_sibling_writes_that_relink_and_abandon_rows_never_deadlock(clock) -> None:
    """A replanned fan-out: every sibling's write abandons the same diverged rows and relinks
    its predecessor's row, from its own connection at the same moment. PostgreSQL locked those
    rows in whatever order each statement met them, so two siblings could deadlock; writes
    that touch rows other than their own now take the run row first, one at a time."""
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    token = transitions.lease_claim(run_id=run.run_id, owner="a", clock=clock)
    assert token
    diverged = [f"old.{n}" for n in range(6)]
    for step_id in diverged:
        transitions.step_write(
            read_write(
                run_id=run.run_id, token=token, step_id=step_id, now=clock(), result_json="1"
            )
        )
    siblings = [f"fan.{n}" for n in range(4)]
    errors: list[BaseException] = []

    def sibling(n: int, barrier: threading.Barrier, order: list[str]) -> None:
        write = read_write(
            run_id=run.run_id, token=token, step_id=siblings[n], now=clock(), result_json="2"
        )
        write.prev_step_id = siblings[n - 1] if n else None
        write.abandon = order
        try:
            barrier.wait(timeout=60)
            transitions.step_write(write)
        except BaseException as exc:  # a deadlock surfaces here as an OperationalError
            errors.append(exc)
        finally:
            connections.close_all()

    rng = random.Random(14)
    for _round in range(15):
        barrier = threading.Barrier(len(siblings))
        threads = [
            threading.Thread(target=sibling, args=(n, barrier, rng.sample(diverged, k=6)))
            for n in range(len(siblings))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == [], errors
    statuses = dict(Step.objects.filter(run_id=run.run_id).values_list("step_id", "status"))
    assert all(statuses[s] == "abandoned" for s in diverged)
    assert all(statuses[s] == "succeeded" for s in siblings)
