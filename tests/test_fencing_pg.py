"""Fencing under real concurrency on PostgreSQL: a takeover cannot slip between check and write."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from ledger_support import read_write

from ledger import transitions
from ledger.errors import LeaseLost
from ledger.models import Run, Step

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
        thief.join(timeout=1)
        assert "done" not in results  # blocked by the share lock
        cur.execute("COMMIT")
    thief.join(timeout=10)
    assert results.get("done")
    assert Step.objects.filter(run_id=run.run_id, step_id="s1").exists()
    write.step_id = "s2"
    with pytest.raises(LeaseLost):
        transitions.step_write(write)
