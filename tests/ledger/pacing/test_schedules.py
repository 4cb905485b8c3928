"""Schedules (``ledger.schedules``): bad input refused with nothing written; when ticks fall (cron
in a time zone, intervals on the epoch's grid); what each policy for missed ticks starts; the
pass on a fake clock — one run per tick, recorded on the run, the same run when a pass is
repeated or a killed pass's start is met again; pause, resume and remove audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger import schedules, selectors, transitions
from ledger.errors import Conflict, InvalidInput, NotAllowed
from ledger.models import AuditEvent, Run, Schedule
from ledger.processes.schedules import schedules_tick
from tests.support import paced_agents  # noqa: F401 - registers the agents

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 12, 0, 30, tzinfo=UTC)  # half a minute past a whole minute


def _add(name: str = "tick", *, at: datetime = T0, **kw: object) -> Schedule:
    options: dict[str, object] = {"agent": "paced-free", "inputs": {"seconds": 0}}
    options |= {"interval": 60} if "cron" not in kw else {}
    options |= kw
    return transitions.schedule_add(name=name, by="cli:ops", clock=lambda: at, **options)  # type: ignore[arg-type]


def _runs(schedule: Schedule) -> list[Run]:
    return list(Run.objects.filter(schedule=schedule.schedule_id).order_by("created_at"))


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"cron": "61 * * * *"}, "cron: '61 * * * *' is not a cron expression"),
        ({"cron": "* * * *"}, "has 4 field(s); five are needed"),
        ({"cron": "0 3 * * * *"}, "has 6 field(s)"),
        ({"cron": "every day"}, "five are needed"),
        ({"cron": "0 3 * * *", "timezone_name": "Mars/Olympus"}, "'Mars/Olympus' is not a time"),
        ({"cron": "0 3 * * *", "timezone_name": "../../etc/passwd"}, "is not a time zone"),
        ({"interval": 0}, "interval: 0 s"),
        ({"interval": -5}, "interval: -5 s"),
        ({"interval": 60, "cron": "* * * * *"}, "exactly one"),
        ({"interval": None}, "exactly one"),
        ({"agent": "no-such-agent"}, "no agent named 'no-such-agent'"),
        ({"agent": "paced", "inputs": {"seconds": 0}}, "concurrency key is inputs.customer"),
        ({"inputs": {"bad": float("nan")}}, "inputs:"),
        ({"missed": "sometimes"}, "missed: one of skip, once, each"),
        ({"priority": 12}, "priority"),
        ({"deadline": 0}, "deadline"),
        ({"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(options: dict, says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        _add(**options)
    assert says in str(refused.value)
    assert not Schedule.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize("name", ["", "has space", "sch_0001", "x" * 101, "-lead", "a\x00b"])
def test_a_bad_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="name"):
        _add(name)
    assert not Schedule.objects.exists()


def test_a_name_in_use_is_a_conflict_until_that_schedule_is_removed() -> None:
    first = _add("nightly")
    with pytest.raises(Conflict, match="a schedule named 'nightly' exists"):
        _add("nightly")
    transitions.schedule_remove(schedule_id=first.schedule_id, by="cli:ops")
    second = _add("nightly")
    assert second.schedule_id != first.schedule_id
    assert selectors.schedule_named("nightly") == second
    assert selectors.schedule_named(first.schedule_id) == first


def test_cron_ticks_in_the_schedules_time_zone_across_a_clock_change() -> None:
    spec = schedules.check_spec(cron="0 3 * * *", timezone="Europe/Paris")
    winter = spec.next_after(datetime(2026, 3, 28, 12, tzinfo=UTC))
    summer = spec.next_after(winter)
    assert winter == datetime(2026, 3, 29, 1, tzinfo=UTC)  # 03:00 CEST, the change's morning
    assert summer == datetime(2026, 3, 30, 1, tzinfo=UTC)
    assert spec.next_after(datetime(2026, 12, 3, tzinfo=UTC)) == datetime(
        2026, 12, 3, 2, tzinfo=UTC
    )
    every = schedules.check_spec(interval=3600)
    assert every.next_after(T0) == datetime(2026, 12, 3, 13, tzinfo=UTC)  # the epoch's grid


def test_each_policy_for_missed_ticks_and_the_bound_of_each() -> None:
    spec = schedules.check_spec(interval=60)
    first = datetime(2026, 12, 3, 12, 1, tzinfo=UTC)
    late = first + timedelta(minutes=10, seconds=5)  # 11 ticks due, the newest 5 s ago
    due = {
        p: schedules.due_ticks(spec, next_at=first, now=late, policy=p, grace=30)
        for p in schedules.POLICIES
    }
    assert due["skip"].ticks == [first + timedelta(minutes=10)]  # the newest is on time
    assert due["once"].ticks == [first + timedelta(minutes=10)]
    assert due["each"].ticks == [first + timedelta(minutes=i) for i in range(11)]
    assert [d.skipped for d in due.values()] == [10, 10, 0]
    assert {d.next_at for d in due.values()} == {first + timedelta(minutes=11)}
    later = late + timedelta(seconds=30)
    stale = schedules.due_ticks(spec, next_at=first, now=later, policy="skip", grace=30)
    assert stale.ticks == [] and stale.skipped == 11  # the newest 35 s ago: none on time
    week_later = first + timedelta(days=7)
    week = schedules.due_ticks(spec, next_at=first, now=week_later, policy="each", grace=30)
    assert len(week.ticks) == schedules.CATCH_UP_MAX == 100
    assert week.ticks[-1] == first + timedelta(days=7)  # the newest hundred
    assert week.skipped == 7 * 24 * 60 + 1 - 100


def test_a_tick_starts_one_run_that_names_its_schedule_and_a_second_pass_starts_none() -> None:
    schedule = _add(priority=3, deadline=600, missed="each")
    assert schedule.next_at == datetime(2026, 12, 3, 12, 1, tzinfo=UTC)
    assert schedules_tick(clock=lambda: T0) == []  # nothing due yet
    at = datetime(2026, 12, 3, 12, 1, 2, tzinfo=UTC)
    started = schedules_tick(clock=lambda: at)
    assert schedules_tick(clock=lambda: at) == []  # the schedule moved on: nothing due
    (run,) = _runs(schedule)
    assert started == [run.run_id]
    assert run.idempotency_key == f"schedule:{schedule.schedule_id}:2026-12-03T12:01:00+00:00"
    assert (run.agent, run.inputs, run.priority) == ("paced-free", {"seconds": 0}, 3)
    assert run.deadline_at == at + timedelta(seconds=600)
    schedule.refresh_from_db()
    assert schedule.last_run_id == run.run_id and schedule.last_tick_at.minute == 1
    assert schedule.next_at == datetime(2026, 12, 3, 12, 2, tzinfo=UTC)
    filtered = selectors.RunFilter(schedule=schedule.schedule_id)
    assert [r.run_id for r in selectors.runs_filtered(flt=filtered, now=at)] == [run.run_id]


def test_a_pass_killed_after_its_start_leaves_the_tick_due_and_the_next_finds_its_run() -> None:
    schedule = _add(missed="each")
    tick = schedule.next_at
    # What a pass killed between its start and its advance leaves: the tick's run, committed,
    # and the schedule not moved on.
    killed = transitions.run_start_once(
        agent="paced-free",
        inputs={"seconds": 0},
        idempotency_key=schedules.tick_key(schedule.schedule_id, tick),
        schedule=schedule.schedule_id,
    ).run
    again = schedules_tick(clock=lambda: tick + timedelta(seconds=1))
    assert again == [killed.run_id]
    assert [r.run_id for r in _runs(schedule)] == [killed.run_id]
    schedule.refresh_from_db()
    assert schedule.next_at == tick + timedelta(minutes=1)


def test_missed_ticks_after_an_outage_under_each_policy(settings) -> None:
    each = _add("each", missed="each")
    once = _add("once", missed="once")
    skip = _add("skip", missed="skip")
    late = T0 + timedelta(minutes=5)  # ticks 12:01 … 12:05 due; the newest 30 s ago
    schedules_tick(clock=lambda: late)
    assert len(_runs(each)) == 5 and len(_runs(once)) == 1 and len(_runs(skip)) == 1
    much_later = late + timedelta(minutes=30)  # 30 more ticks, the newest 30 s ago > grace 20
    settings.RUNLEDGER_SCHEDULE_GRACE_SECONDS = 20
    schedules_tick(clock=lambda: much_later)
    assert len(_runs(each)) == 35 and len(_runs(once)) == 2 and len(_runs(skip)) == 1
    skip.refresh_from_db()
    assert skip.ticks_skipped == 4 + 30 and skip.next_at > much_later


def test_pause_resume_and_remove_are_audited_and_a_paused_schedule_starts_nothing() -> None:
    schedule = _add()
    transitions.schedule_pause(schedule_id=schedule.schedule_id, by="cli:ops", reason="deploy")
    with pytest.raises(NotAllowed, match="paused already"):
        transitions.schedule_pause(schedule_id=schedule.schedule_id, by="cli:ops")
    assert schedules_tick(clock=lambda: T0 + timedelta(hours=1)) == []
    resumed_at = T0 + timedelta(hours=1)
    transitions.schedule_resume(
        schedule_id=schedule.schedule_id, by="cli:ops", clock=lambda: resumed_at
    )
    schedule.refresh_from_db()
    assert schedule.next_at == datetime(2026, 12, 3, 13, 1, tzinfo=UTC)  # from now on
    transitions.schedule_remove(schedule_id=schedule.schedule_id, by="cli:ops")
    assert schedules_tick(clock=lambda: T0 + timedelta(hours=2)) == []
    with pytest.raises(NotAllowed, match="was removed"):
        transitions.schedule_resume(schedule_id=schedule.schedule_id, by="cli:ops")
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor", "reason"))
    assert actions == [
        ("schedule_add", "cli:ops", "schedule added"),
        ("schedule_pause", "cli:ops", "deploy"),
        ("schedule_resume", "cli:ops", "schedule resumed"),
        ("schedule_remove", "cli:ops", "schedule removed"),
    ]
    assert not Run.objects.exists()
