"""The runs-per-status counts the dashboard reads (kept by ``ledger_run``'s triggers, migration
0016) equal a COUNT(*) of the table after a randomized sequence of real transitions: starts,
executions to success, crashes re-queued by the sweep, pauses held and lifted, cancels,
resumes of blocked runs, bulk inserts and COPY, bulk updates and deletes, with folds between.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from harness.management.commands.seed_bulk import RUN_COLUMNS, _copy
from harness.unannounced import start_unannounced
from ledger import selectors, transitions
from ledger.errors import OperationError
from ledger.models import Run, RunStatusCount, RunStatusDelta
from ledger.processes.sweep import runs_sweep
from ledger.transitions.counts import fold_status_counts

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the kept counts are PostgreSQL's"
    ),
]


def _table() -> tuple[Counter[str], Counter[str]]:
    by_status: Counter[str] = Counter()
    by_reason: Counter[str] = Counter()
    rows = Run.objects.order_by().values_list("status", "reason").annotate(n=Count("*"))
    for status, reason, n in rows:
        by_status[status] += n
        if status == "needs_attention":
            by_reason[reason or "unknown"] += n
    return by_status, by_reason


def _assert_exact(now: datetime | None = None) -> None:
    """The kept counts equal COUNT(*); ``now`` (only the lease-expired count reads it) is the
    test's fake clock where it has one."""
    counts = selectors.run_status_counts(now=now or timezone.now())
    by_status, by_reason = _table()
    assert {s: n for s, n in counts.by_status.items() if n} == dict(by_status)
    assert {r: n for r, n in counts.by_reason.items() if n} == dict(by_reason)
    assert counts.total == Run.objects.count()


def _copy_row(i: int, status: str, now: datetime) -> tuple[Any, ...]:
    values: dict[str, Any] = {
        "run_id": f"run_copy_{i:06d}", "agent": "survey", "inputs": "{}", "status": status,
        "reason": "stale" if status == "needs_attention" else "", "blocked_step_id": "",
        "detail": "", "result": None, "error": "", "plan_version": "1", "tool_schema_hash": "",
        "code_version": "", "resume_count": 0, "max_resumes": 3, "executions": 0,
        "lease_owner": "", "lease_token": None, "lease_expires_at": None, "heartbeat_at": None,
        "parent_id": None, "parent_kind": "", "forked_from_step_id": "", "created_at": now,
        "updated_at": now, "status_changed_at": now, "started_at": None, "finished_at": None,
        "title": "", "labels": "{}", "search_steps": "",
    }  # fmt: skip
    return tuple(values[c] for c in RUN_COLUMNS)


def test_counts_equal_count_star_after_random_transitions(
    execute: Callable[..., Any],
    crash_at: Callable[..., None],
    clock: Any,
    people: Any,
    blocked: Callable[..., Run],
) -> None:
    rng = random.Random(22)
    copied = [0]

    def ids(*statuses: str) -> list[str]:
        return list(Run.objects.filter(status__in=statuses).values_list("run_id", flat=True))

    def start() -> None:
        start_unannounced(agent="survey", inputs={"records": rng.randint(1, 4)})

    def run_one() -> None:
        if queued := ids("queued"):
            execute(rng.choice(queued))

    def crash_then_sweep() -> None:
        run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
        crash_at("fetch_invoice")
        execute(run.run_id, crash_expected=True)  # left running, its lease expired
        runs_sweep(clock=clock)  # re-queued by the sweep

    def pause_and_lift() -> None:
        run = start_unannounced(agent="survey", inputs={"records": 2})
        pause = transitions.pause_create(
            scope="run", target=run.run_id, by=people.alice, reason="hold it"
        )
        execute(run.run_id)  # the worker holds it paused
        if rng.random() < 0.6:
            transitions.pause_lift(pause_id=pause.pk, by=people.alice, reason="go on")

    def block() -> None:
        blocked("refund", {"invoice_id": "inv_1001"}, "notify.after_effect", "reconciliation")

    def fail() -> None:
        run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_none"})
        execute(run.run_id)  # no such invoice: retried, then failed

    def cancel() -> None:
        if open_ := ids("queued", "needs_attention", "paused"):
            transitions.run_cancel(
                run_id=rng.choice(open_), by=people.alice, reason="no", seen_version=None
            )

    def resume() -> None:
        if stuck := ids("needs_attention"):
            transitions.run_resume(
                run_id=rng.choice(stuck), by=people.alice, reason="again", seen_version=None
            )

    def bulk_insert_and_copy() -> None:
        status = ["queued", "succeeded", "needs_attention"]
        rows = [_copy_row(copied[0] + n, rng.choice(status), clock())
                for n in range(rng.randint(1, 6))]  # fmt: skip
        copied[0] += len(rows)
        _copy("ledger_run", RUN_COLUMNS, rows)

    def bulk_update_and_delete() -> None:
        # Rows without steps (the COPY's): an UPDATE of many rows at once, then a DELETE.
        mine = Run.objects.filter(run_id__startswith="run_copy_")
        mine.filter(status="queued").update(status="failed", reason="")
        mine.filter(status="needs_attention").update(reason="budget")
        if rng.random() < 0.5:
            # (run_one may have executed a copied queued run: its steps keep it.)
            mine.filter(status="succeeded", steps__isnull=True).delete()

    actions = [start, run_one, crash_then_sweep, pause_and_lift, block, fail, cancel, resume,
               bulk_insert_and_copy, bulk_update_and_delete]  # fmt: skip
    for _ in range(60):
        action = rng.choice(actions)
        with contextlib.suppress(OperationError):  # refused: nothing changed, counts must agree
            action()
        if rng.random() < 0.3:
            fold_status_counts()
        _assert_exact(clock())
    # The walk may end with a status emptied (resumes and cancels take needs-attention runs):
    # one run of each status the checks below need, counted like the rest.
    block()
    start()
    _assert_exact(clock())
    fold_status_counts()
    _assert_exact(clock())
    assert not RunStatusDelta.objects.exists()
    statuses = set(RunStatusCount.objects.filter(n__gt=0).values_list("status", flat=True))
    assert {"succeeded", "queued", "needs_attention"} <= statuses, statuses


def test_counts_are_exact_after_truncate_and_fold_is_idempotent(
    execute: Callable[..., Any],
) -> None:
    for _ in range(3):
        start_unannounced(agent="survey", inputs={"records": 1})
    fold_status_counts()
    fold_status_counts()
    _assert_exact()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE ledger_run CASCADE")
    _assert_exact()
    assert selectors.run_status_counts(now=timezone.now()).total == 0


def test_the_sweep_folds_the_deltas(clock: Any) -> None:
    for _ in range(2):
        start_unannounced(agent="survey", inputs={"records": 1})
    assert RunStatusDelta.objects.exists()  # the starts' inserts, not folded yet
    runs_sweep(clock=clock)
    assert not RunStatusDelta.objects.exists()
    assert RunStatusCount.objects.get(status="queued", reason="").n == 2
    _assert_exact(clock())
