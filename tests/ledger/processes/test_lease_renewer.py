"""One lease renewer per process: every lease it holds renewed by one statement; a refused
renewal ends that run only; a row another session holds is neither renewed nor lost, and the
renewal does not wait for it."""

from __future__ import annotations

import math
import threading
import time

import psycopg
import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from harness.cluster import wait_for
from ledger import transitions
from ledger.engine.fence import LeaseFence
from ledger.models import Run
from ledger.processes.leases import Held, LeaseRenewer
from tests.ledger.processes.test_sweep_frozen_holder import psycopg_conninfo

pytestmark = [pytest.mark.django_db(transaction=True)]
BOUND = 60.0


def _held(n: int) -> list[Held]:
    out = []
    for i in range(n):
        run = transitions.run_start(agent="refund", inputs={"invoice_id": f"inv_{i}"})
        token = transitions.lease_claim(run_id=run.run_id, owner="me", seconds=30)
        assert token
        fence = LeaseFence(
            run_id=run.run_id, token=1, lease_seconds=30, margin=5, sent_at=time.monotonic() - 20
        )
        out.append(Held(run.run_id, token, 30.0, fence, agent="refund"))
    return out


def _expiries(held: list[Held]) -> dict[str, object]:
    rows = Run.objects.filter(pk__in=[h.run_id for h in held])
    return dict(rows.values_list("run_id", "lease_expires_at"))


def _beat_on_a_thread(renewer: LeaseRenewer, held: list[Held]) -> None:
    thread = threading.Thread(
        target=lambda: (renewer.beat(held), connections.close_all()), daemon=True
    )
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the renewal is waiting on a row another session holds"


@pytest.mark.sqlite_ok
def test_one_statement_renews_every_lease_the_process_holds() -> None:
    held = _held(5)
    before, deadlines = _expiries(held), [h.fence.deadline for h in held]
    renewer = LeaseRenewer()
    with CaptureQueriesContext(connection) as queries:
        renewer.beat(held)
    after = _expiries(held)
    assert all(after[h.run_id] > before[h.run_id] for h in held)
    assert all(h.fence.deadline > d for h, d in zip(held, deadlines, strict=True))
    assert not any(h.lost.is_set() for h in held)
    if connection.vendor == "postgresql":
        renewals = [q for q in queries.captured_queries if "UPDATE" in q["sql"].upper()]
        assert len(renewals) == 1


@pytest.mark.sqlite_ok
def test_a_refused_renewal_ends_that_run_only() -> None:
    renewer = LeaseRenewer()
    held = [  # the thread's first beat is an hour away: this test beats by hand
        renewer.hold(run_id=h.run_id, token=h.token, seconds=3600, fence=h.fence, agent=h.agent)
        for h in _held(3)
    ]
    taken = held[1]
    Run.objects.filter(pk=taken.run_id).update(lease_token="someone-else")  # a takeover
    renewer.beat(held)
    assert taken.lost.is_set() and taken.fence.deadline == -math.inf
    assert [h.lost.is_set() for h in held] == [False, True, False]
    assert all(h.fence.deadline > time.monotonic() for h in (held[0], held[2]))
    assert sorted(h.run_id for h in renewer.held()) == sorted([held[0].run_id, held[2].run_id])


def test_a_row_another_session_holds_is_skipped_not_waited_on() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SKIP LOCKED is PostgreSQL's")
    held = _held(3)
    busy = held[0]
    deadline = busy.fence.deadline
    before = _expiries(held)
    with psycopg.connect(psycopg_conninfo(connection.settings_dict)) as other:
        # An operator's action holds the run row (FOR UPDATE) while the renewer beats.
        other.execute("SELECT 1 FROM ledger_run WHERE run_id = %s FOR UPDATE", [busy.run_id])
        _beat_on_a_thread(LeaseRenewer(), held)
        other.rollback()
    after = _expiries(held)
    assert after[busy.run_id] == before[busy.run_id] and busy.fence.deadline == deadline
    assert not busy.lost.is_set()  # not refused: the next beat tries again
    assert all(after[h.run_id] > before[h.run_id] for h in held[1:])
    assert timezone.now() < after[held[1].run_id]


def test_a_row_held_at_a_beat_is_renewed_soon_after_not_a_third_of_the_lease_later() -> None:
    """A busy run's row is often held by its own step's write at the moment of a beat; skipping
    it until the next regular beat (a third of the lease) three times in a row loses the lease.
    Here the lease is an hour: the regular beat would come in 20 minutes."""
    if connection.vendor != "postgresql":
        pytest.skip("SKIP LOCKED is PostgreSQL's")
    [template] = _held(1)
    renewer = LeaseRenewer()
    with psycopg.connect(psycopg_conninfo(connection.settings_dict)) as other:
        other.execute("SELECT 1 FROM ledger_run WHERE run_id = %s FOR UPDATE", [template.run_id])
        before = _expiries([template])[template.run_id]
        held = renewer.hold(
            run_id=template.run_id, token=template.token, seconds=3600, fence=template.fence
        )
        renewer.poke()  # the first beat now, while the row is held: skipped
        assert wait_for(lambda: renewer.beats >= 1, timeout=BOUND)
        assert _expiries([held])[held.run_id] == before
        other.rollback()
    # The row is free again: the renewer comes back for it without waiting 20 minutes.
    assert wait_for(lambda: _expiries([held])[held.run_id] > before, timeout=BOUND)
    assert not held.lost.is_set()
    renewer.let_go(held)
