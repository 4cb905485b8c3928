"""Two (or more) people settling the same step at once, on real concurrent PostgreSQL
connections: exactly one wins, the others get Conflict, and nothing is half-applied."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction  # noqa: F401 (skipif)

from ledger import transitions
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Run, Settlement
from tests.support.ledger_writes import wait_for_lock_waiters
from tests.support.operator_agents import step_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def start_race(n: int, act: Callable[[int], Any]) -> Callable[[], list[Any]]:
    """Start ``act(i)`` in ``n`` threads, each on its own database connection, released
    together; returns a function that joins them and gives ("ok", value) or ("error", exc)."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=120)
            results[i] = ("ok", act(i))
        except Exception as exc:
            results[i] = ("error", exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()

    def join() -> list[Any]:
        for t in threads:
            t.join(timeout=180)
        assert not any(t.is_alive() for t in threads)
        return results

    return join


def race(n: int, act: Callable[[int], Any]) -> list[Any]:
    return start_race(n, act)()


def test_many_approvers_at_once_exactly_one_applies(
    blocked, people, enqueued, django_user_model
) -> None:
    run = blocked("ops-blind", {"n": 9}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    proposal = transitions.settlement_propose(
        step=step, outcome="not_happened", reason="r", by=people.alice, seen_version=step.version
    )
    approvers = [django_user_model.objects.create_user(username=f"approver{i}") for i in range(6)]

    results = race(
        6,
        lambda i: transitions.settlement_approve(
            settlement=proposal, by=approvers[i], reason=f"approver {i}"
        ),
    )

    wins = [value for kind, value in results if kind == "ok"]
    losses = [value for kind, value in results if kind == "error"]
    assert len(wins) == 1
    assert all(isinstance(e, transitions.Conflict) for e in losses), losses
    assert all("already applied" in str(e) for e in losses)
    winner = wins[0].decided_by_name
    assert Settlement.objects.get().status == "applied"
    assert step_of(run, "charge").version == step.version + 1
    assert list(AuditEvent.objects.filter(action="settlement_approve").values_list("actor")) == [
        (winner,)
    ]
    assert enqueued.ids == [run.run_id]
    assert Run.objects.get(pk=run.pk).status == "queued"


def test_operators_settling_one_step_at_once_with_approval_off_one_wins(
    blocked, people, enqueued, settings
) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = blocked("ops-blind", {"n": 9}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    charge = ProviderCharge.objects.get()
    answers: list[dict[str, Any]] = [
        {"outcome": "happened", "result": {"charge_id": charge.charge_id}},
        {"outcome": "not_happened"},
        {"outcome": "abandon"},
        {"outcome": "happened", "result": {"charge_id": "ch_other"}},
    ]

    results = race(
        4,
        lambda i: transitions.settlement_propose(
            step=step,
            reason=f"operator {i}",
            by=f"operator{i}",
            seen_version=step.version,
            **answers[i],
        ),
    )

    wins = [(i, value) for i, (kind, value) in enumerate(results) if kind == "ok"]
    losses = [value for kind, value in results if kind == "error"]
    assert len(wins) == 1 and len(losses) == 3
    assert all(isinstance(e, transitions.Conflict) for e in losses), losses
    assert all("changed since you opened it" in str(e) for e in losses)
    assert all(e.current["version"] == step.version + 1 for e in losses)
    index, settlement = wins[0]
    assert list(Settlement.objects.values_list("pk", flat=True)) == [settlement.pk]
    assert AuditEvent.objects.count() == 1
    settled = step_of(run, "charge")
    expected = {"happened": "succeeded", "not_happened": "pending", "abandon": "abandoned"}
    assert settled.status == expected[answers[index]["outcome"]]
    assert settled.result == answers[index].get("result")
    assert settled.settled_by == f"operator{index}"


def test_two_proposals_queued_behind_the_same_lock_one_wins(blocked, settings) -> None:
    """Deterministic interleaving: both proposals, made from the same version of the step, wait
    on the run row; when it is released the first writes, the second finds the version moved."""
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = blocked("ops-blind", {"n": 9}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    with transaction.atomic():
        Run.objects.select_for_update().get(pk=run.pk)  # hold the lock the actions need
        join = start_race(
            2,
            lambda i: transitions.settlement_propose(
                step=step,
                outcome="not_happened",
                reason="r",
                by=f"op{i}",
                seen_version=step.version,
            ),
        )
        wait_for_lock_waiters(2)  # both are inside settlement_propose, queued on the run row
    results = join()
    assert sorted(kind for kind, _ in results) == ["error", "ok"]
    error = next(v for k, v in results if k == "error")
    assert isinstance(error, transitions.Conflict)
    assert Settlement.objects.count() == 1 and AuditEvent.objects.count() == 1
