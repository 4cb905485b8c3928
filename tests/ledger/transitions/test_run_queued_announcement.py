"""Every run a transition queues is announced once, after its commit, through
``ledger.signals.run_queued`` — the one way a queued run reaches the workers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from ledger import selectors, signals, transitions
from ledger.models import Run
from ledger.processes import sweep
from runs.operations import tasks
from tests.support.announcements import recording

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def announced() -> Iterator[list[tuple[str, str]]]:
    with recording() as record:
        yield record.seen


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What the workers' receiver sends to the broker: (task, run id), and the queue of those
    sent to a queue of their own in ``sent_to``."""
    out: list[tuple[str, str]] = []

    def send(task: Any, run_id: str, *, eta: Any = None, queue: str | None = None) -> None:
        out.append((task.name, run_id))
        if queue is not None:
            sent_to[run_id] = queue

    sent_to.clear()
    monkeypatch.setattr(tasks, "_send", send)
    return out


sent_to: dict[str, str] = {}


def failed_run(execute, crash_at) -> Run:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"}, max_resumes=0)
    crash_at("fetch_invoice")
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id).reason == "budget"
    run.refresh_from_db()
    return run


def test_a_start_is_announced_once_after_its_commit(announced, sent) -> None:
    with transaction.atomic():
        run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
        assert announced == []  # not before the commit
    assert announced == [(run.run_id, "start")]
    assert sent == [("runledger.start_run", run.run_id)]


def test_a_start_that_rolls_back_is_never_announced(announced) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
        raise RuntimeError("the caller's transaction fails")
    assert announced == []
    assert not Run.objects.exists()


def test_a_run_queued_while_held_is_not_announced(announced) -> None:
    with signals.held():
        transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    assert announced == []
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1003"})
    assert announced == [(run.run_id, "start")]  # held only inside the block


def test_a_resume_goes_to_the_resume_task_and_a_fork_to_the_start_task(
    execute, crash_at, announced, sent
) -> None:
    run = failed_run(execute, crash_at)
    announced.clear()
    sent.clear()
    transitions.run_resume(
        run_id=run.run_id, by="cli:alice", reason="r", seen_version=run.version, max_resumes=2
    )
    assert announced == [(run.run_id, "resume")]
    assert sent == [("runledger.resume_run", run.run_id)]
    assert execute(run.run_id).status == "succeeded"
    fork = transitions.run_fork(
        run_id=run.run_id, step_id="fetch_invoice", by="cli:alice", reason="r", confirm_resend=3
    )
    assert announced[-1] == (fork.run_id, "fork")
    assert sent[-1] == ("runledger.start_run", fork.run_id)


def test_the_sweeps_recovery_is_announced(clock, announced, sent) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    token = transitions.lease_claim(run_id=run.run_id, owner="w1", clock=clock)
    assert token is not None
    announced.clear()
    sent.clear()
    clock.advance(settings.RUNLEDGER_LEASE_SECONDS + 1)
    assert sweep.runs_sweep(clock=clock) == [run.run_id]
    assert announced == [(run.run_id, "recovery")]
    # Its resume does not queue behind the backlog (issue 24).
    assert sent == [("runledger.resume_run", run.run_id)]
    assert sent_to == {run.run_id: settings.RUNLEDGER_RECOVERED_QUEUE}
    assert selectors.runs_with_expired_leases(now=clock() + timedelta(days=1)) == []


def test_the_deprecated_on_commit_still_runs_after_the_commit_with_a_warning(
    execute, crash_at, announced
) -> None:
    run = failed_run(execute, crash_at)
    called: list[str] = []
    with pytest.warns(DeprecationWarning, match=r"run_resume\(on_commit=...\) is deprecated"):
        transitions.run_resume(
            run_id=run.run_id, by="cli:alice", reason="r", seen_version=run.version,
            max_resumes=2, on_commit=called.append,
        )  # fmt: skip
    assert called == [run.run_id]
    assert announced[-1] == (run.run_id, "resume")
