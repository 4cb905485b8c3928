"""Durable sleeps and events in (issue 33), as a worker executes them (``run_execute``) on the
test database with a fake clock (its ``sleep`` moves time, nothing waits): sync and async
agents alike. The real workers' version (no slot held, SIGKILL) is
tests/runs/operations/test_waits_workers.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import api
from ledger.errors import Conflict, InvalidInput, NotAllowed, PayloadTooLarge, UnknownRun
from ledger.models import MailboxEvent, Run, Step
from ledger.processes.execute import run_execute
from ledger.transitions.mailbox import NEVER
from tests.support import wait_agents
from tests.support.announcements import Announcements, recording

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

HOUR = 3600.0
SYNC_AND_ASYNC = pytest.mark.parametrize("suffix", ["", "-async"])


@pytest.fixture
def announced() -> Iterator[Announcements]:
    with recording() as seen:
        yield seen


def execute(run_id: str, clock: Any) -> Any:
    return run_execute(
        run_id=run_id, worker="worker-1", clock=clock, heartbeat=False, sleep=clock.sleep
    )


def run_row(run_id: str) -> Run:
    return Run.objects.get(pk=run_id)


def nap(run_id: str) -> Step:
    return Step.objects.get(run_id=run_id, step_id="nap")


@SYNC_AND_ASYNC
def test_a_long_sleep_releases_the_run_until_it_is_due(suffix, clock, tmp_path) -> None:
    marks = str(tmp_path / "marks")
    run = start_unannounced(agent=f"sleeper{suffix}", inputs={"seconds": HOUR, "marks": marks})
    due = clock() + timedelta(seconds=HOUR)

    outcome = execute(run.run_id, clock)

    assert outcome.status == "queued" and outcome.reason == "sleep"
    released = run_row(run.run_id)
    assert (released.status, released.lease_token, released.wake_at) == ("queued", None, due)
    assert nap(run.run_id).status == "pending"
    assert nap(run.run_id).result == {"due": due.isoformat()}
    assert clock.slept == []  # nothing waited holding the run
    assert execute(run.run_id, clock) is None  # not claimable before it is due
    assert wait_agents.marks(marks) == ["before"]

    clock.advance(HOUR)
    outcome = execute(run.run_id, clock)

    assert outcome.status == "succeeded"
    done = run_row(run.run_id)
    assert (done.resume_count, done.wake_at, done.executions) == (0, None, 2)  # no budget spent
    assert nap(run.run_id).status == "succeeded"
    assert wait_agents.marks(marks) == ["before", "after"]


@SYNC_AND_ASYNC
def test_a_short_sleep_waits_holding_the_run(suffix, clock, tmp_path) -> None:
    marks = str(tmp_path / "marks")
    run = start_unannounced(agent=f"sleeper{suffix}", inputs={"seconds": 2.5, "marks": marks})

    outcome = execute(run.run_id, clock)

    assert outcome.status == "succeeded"
    assert clock.slept == [2.5]
    assert run_row(run.run_id).executions == 1


def test_a_resume_after_a_crash_in_the_sleep_waits_only_the_rest(clock, tmp_path) -> None:
    """The due time comes from the ledger: a resume neither shortens nor repeats the sleep."""
    marks = str(tmp_path / "marks")
    run = start_unannounced(agent="sleeper", inputs={"seconds": 8.0, "marks": marks})
    due = clock() + timedelta(seconds=8.0)

    class Died(BaseException):
        pass

    def die_after(seconds: float) -> None:
        clock.advance(3.0)  # three seconds into the sleep, the worker dies
        raise Died()

    with pytest.raises(Died):
        run_execute(run_id=run.run_id, worker="w1", clock=clock, heartbeat=False, sleep=die_after)
    assert nap(run.run_id).result == {"due": due.isoformat()}
    clock.advance(31.0)  # the dead worker's lease expires: 34 s since the sleep began
    Run.objects.filter(pk=run.run_id).update(status="queued", lease_token=None)  # the sweep's

    outcome = execute(run.run_id, clock)

    assert outcome.status == "succeeded"
    assert clock.slept == []  # past the due time: not slept again
    assert nap(run.run_id).result == {"due": due.isoformat()}
    assert wait_agents.marks(marks) == ["before", "after"]


def test_a_sleep_until_a_moment_records_that_moment(clock, tmp_path) -> None:
    marks = str(tmp_path / "marks")
    until = clock() + timedelta(days=2)
    run = start_unannounced(agent="sleeper", inputs={"until": until.isoformat(), "marks": marks})

    execute(run.run_id, clock)

    assert run_row(run.run_id).wake_at == until
    clock.advance(2 * 86400)
    assert execute(run.run_id, clock).status == "succeeded"


# --- events -----------------------------------------------------------------------------------


def listen(clock: Any, tmp_path: Path, suffix: str = "", **inputs: Any) -> str:
    """A listener run; the fake clock starts at the real one (an event's sender stamps the
    wake-up it causes with the real time, which the fake clock must have reached)."""
    clock.now = timezone.now()
    marks = str(tmp_path / "marks")
    run = start_unannounced(
        agent=f"listener{suffix}", inputs={"count": 3, "marks": marks, **inputs}
    )
    return run.run_id


@SYNC_AND_ASYNC
def test_events_sent_before_during_and_after_the_wait_are_each_taken_once_in_order(
    suffix, clock, tmp_path, announced
) -> None:
    run_id = listen(clock, tmp_path, suffix)
    api.send_event(run_id, "reply", {"n": 1}, event_id="e1")  # before it waits

    outcome = execute(run_id, clock)  # takes e1, then waits for the second: released

    assert outcome.status == "queued" and outcome.reason == "event"
    waiting = run_row(run_id)
    assert (waiting.wake_at, waiting.wait_event, waiting.lease_token) == (NEVER, "reply", None)
    assert execute(run_id, clock) is None  # nothing to do until an event comes

    api.send_event(run_id, "other", "ignored", event_id="x1")  # another name: no wake-up
    assert run_row(run_id).wake_at == NEVER
    api.send_event(run_id, "reply", {"n": 2}, event_id="e2")  # during the wait: wakes it
    assert run_row(run_id).wake_at < NEVER
    clock.advance(1)
    assert announced.seen[-1] == (run_id, "event")
    api.send_event(run_id, "reply", {"n": 3}, event_id="e3")  # after: kept in the mailbox
    api.send_event(run_id, "reply", {"n": 2}, event_id="e2")  # a repeat: the same event

    outcome = execute(run_id, clock)

    assert outcome.status == "succeeded"
    assert outcome.result == {"got": [{"n": 1}, {"n": 2}, {"n": 3}]}
    taken = dict(
        MailboxEvent.objects.filter(run_id=run_id).values_list("event_id", "consumed_step_id")
    )
    assert taken == {"e1": "reply.0", "e2": "reply.1", "e3": "reply.2", "x1": ""}
    assert run_row(run_id).resume_count == 0


def test_a_crash_between_the_event_and_the_step_commit_takes_it_again_once(clock, tmp_path) -> None:
    """The event and its step commit together: a worker that dies after the event arrived and
    before its step committed leaves the event in the mailbox for the next execution."""
    run_id = listen(clock, tmp_path, count=1)
    api.send_event(run_id, "reply", "first", event_id="e1")

    class Died(BaseException):
        pass

    import ledger.transitions.mailbox as mailbox

    real = mailbox.step_update

    def die(**kwargs: Any) -> None:
        real(**kwargs)
        raise Died()  # inside the transaction: the step's write and the take roll back

    mailbox.step_update = die
    try:
        with pytest.raises(Died):
            execute(run_id, clock)
    finally:
        mailbox.step_update = real
    assert MailboxEvent.objects.get(event_id="e1").consumed_step_id == ""
    clock.advance(60)
    Run.objects.filter(pk=run_id).update(status="queued", lease_token=None)  # the sweep's

    outcome = execute(run_id, clock)

    assert outcome.result == {"got": ["first"]}
    assert MailboxEvent.objects.get(event_id="e1").consumed_step_id == "reply.0"


@SYNC_AND_ASYNC
def test_a_timeout_is_a_value_the_agent_sees(suffix, clock, tmp_path) -> None:
    run_id = listen(clock, tmp_path, suffix, count=1, timeout=HOUR)

    execute(run_id, clock)
    assert run_row(run_id).wake_at == clock() + timedelta(seconds=HOUR)

    clock.advance(HOUR)
    outcome = execute(run_id, clock)

    assert outcome.status == "succeeded" and outcome.result == {"got": ["timed out"]}
    assert Step.objects.get(run_id=run_id, step_id="reply.0").result["timed_out"] is True


def test_a_short_timeout_waits_holding_the_run_and_sees_an_event_that_comes(
    clock, tmp_path
) -> None:
    run_id = listen(clock, tmp_path, count=1, timeout=5.0)
    sent = []

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if not sent:  # an event arrives while the worker waits holding the run
            sent.append(api.send_event(run_id, "reply", "in time", event_id="e1"))

    outcome = run_execute(run_id=run_id, worker="w", clock=clock, heartbeat=False, sleep=sleep)

    assert outcome.result == {"got": ["in time"]}
    assert run_row(run_id).executions == 1


def test_an_event_arriving_as_the_run_is_released_is_not_lost(clock, tmp_path) -> None:
    """The release looks in the mailbox in its own transaction: an event that came after the
    step looked and before the run was released queues the run at once."""
    run_id = listen(clock, tmp_path, count=1)
    import ledger.transitions.mailbox as mailbox

    real = mailbox.mailbox_take

    def take_then_arrive(**kwargs: Any) -> Any:
        taken = real(**kwargs)
        if taken is None and not MailboxEvent.objects.exists():
            api.send_event(run_id, "reply", "late", event_id="late")  # the run is running
        return taken

    mailbox.mailbox_take = take_then_arrive
    import ledger.transitions as transitions

    transitions.mailbox_take = take_then_arrive
    try:
        execute(run_id, clock)
    finally:
        mailbox.mailbox_take = real
        transitions.mailbox_take = real
    assert run_row(run_id).wake_at == clock()  # queued for now, not NEVER
    clock.advance(1)
    assert execute(run_id, clock).result == {"got": ["late"]}


# --- bad input: refused, nothing written ------------------------------------------------------


def test_bad_events_are_refused_and_write_nothing(clock, tmp_path, settings) -> None:
    run_id = listen(clock, tmp_path, count=1)
    api.send_event(run_id, "reply", {"a": 1}, event_id="e1")
    settings.RUNLEDGER_MAX_EVENT_BYTES = 100

    with pytest.raises(UnknownRun):
        api.send_event("run_nope", "reply", 1, event_id="e9")
    with pytest.raises(Conflict):
        api.send_event(run_id, "reply", {"a": 2}, event_id="e1")
    with pytest.raises(PayloadTooLarge):
        api.send_event(run_id, "reply", "x" * 200, event_id="e2")
    with pytest.raises(InvalidInput):
        api.send_event(run_id, "reply", {1, 2}, event_id="e3")
    with pytest.raises(InvalidInput):
        api.send_event(run_id, "", 1, event_id="e4")
    Run.objects.filter(pk=run_id).update(status="succeeded")
    with pytest.raises(NotAllowed):
        api.send_event(run_id, "reply", 1, event_id="e5")

    assert list(MailboxEvent.objects.values_list("event_id", flat=True)) == ["e1"]
    assert api.send_event(run_id, "reply", {"a": 1}, event_id="e1").created is False
