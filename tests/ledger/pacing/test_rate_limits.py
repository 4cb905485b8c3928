"""Rate limits (``ledger.ratelimits``) on a fake clock, in process: slots spaced and taken in
order; a long wait releases the run keeping its slot, which its next execution uses; a 429 with
retry-after blocks the key for every run; bad rates are refused with nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from ledger import api, ratelimits, registry
from ledger.conf import from_environ
from ledger.errors import AgentDefinitionError
from ledger.models import RateHold, RateLimit, Run, RunStatus
from ledger.processes.execute import run_execute
from ledger.transitions import ratelimits as rate_writes
from tests.support import ratelimited_agents
from tests.support.ratelimited_agents import ANSWERS

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


class Clock:
    """The workers' clock and sleep: a sleep moves the clock."""

    def __init__(self) -> None:
        self.now = T0
        self.slept: list[float] = []

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)


def _execute(run_id: str, clock: Clock) -> object:
    return run_execute(
        run_id=run_id,
        worker="w1",
        heartbeat=False,
        clock=clock,
        sleep=clock.sleep,
        lease_seconds=30,
    )


@pytest.mark.sqlite_ok  # the demo's path (one transaction instead of one statement)
def test_slots_are_spaced_evenly_and_taken_in_the_order_asked() -> None:
    take = ratelimits.Take("tool:t", "requests", ratelimits.parse("10/min"))
    slots = [rate_writes.rate_take(take=take, now=T0) for _ in range(12)]
    assert slots == [T0 + timedelta(seconds=6 * i) for i in range(12)]  # 10 in any minute
    later = T0 + timedelta(hours=1)  # idle meanwhile: the next call goes at once, no burst
    assert rate_writes.rate_take(take=take, now=later) == later
    assert rate_writes.rate_take(take=take, now=later) == later + timedelta(seconds=6)
    row = RateLimit.objects.get(pk="tool:t")
    assert (row.taken, row.waited, row.rate) == (14, 12, "10/min")


@pytest.mark.sqlite_ok
def test_a_short_wait_holds_the_run_and_a_long_one_releases_it_keeping_its_slot() -> None:
    clock = Clock()
    run_id = api.start_run("rated", {"calls": 3}).run_id
    # 10/min: slots at 0, 6, 12 s. The second call waits 6 s in the worker; the third 6 more.
    with override_settings(RUNLEDGER_RATE_LIMIT_HOLD_SECONDS=10.0):
        outcome = _execute(run_id, clock)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    assert clock.now == T0 + timedelta(seconds=12)
    # Another run, now that a slot is 6 s away and the hold is 2 s: released, keeping it.
    other = api.start_run("rated", {"calls": 1}).run_id
    with override_settings(RUNLEDGER_RATE_LIMIT_HOLD_SECONDS=2.0):
        outcome = _execute(other, clock)
        assert outcome is not None and (outcome.status, outcome.reason) == ("queued", "rate_limit")
        run = Run.objects.get(pk=other)
        assert run.status == RunStatus.QUEUED and run.lease_token is None
        assert run.detail == "waiting: rate limit tool:rated_ping 10/min, next slot in 6 s"
        slot = T0 + timedelta(seconds=18)
        assert run.wake_at == slot - timedelta(seconds=1)  # woken early by half the hold
        assert list(RateHold.objects.values_list("key", "slot_at")) == [("tool:rated_ping", slot)]
        taken = RateLimit.objects.get(pk="tool:rated_ping").taken
        clock.now = run.wake_at
        outcome = _execute(other, clock)  # uses its kept slot: none taken anew
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    assert clock.now == slot and RateLimit.objects.get(pk="tool:rated_ping").taken == taken
    assert not RateHold.objects.exists()
    assert (Run.objects.get(pk=other).resume_count, Run.objects.get(pk=other).executions) == (0, 2)


def test_a_kept_slot_that_went_by_unused_is_not_used_late() -> None:
    clock = Clock()
    first = api.start_run("rated", {"calls": 1}).run_id
    assert _execute(first, clock) is not None  # slot 0
    run_id = api.start_run("rated", {"calls": 1}).run_id
    with override_settings(RUNLEDGER_RATE_LIMIT_HOLD_SECONDS=2.0):
        _execute(run_id, clock)  # slot 6 kept, released
        clock.now = T0 + timedelta(seconds=30)  # woken long after it (a lost message)
        outcome = _execute(run_id, clock)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    assert clock.now == T0 + timedelta(seconds=30)  # a new slot, free at once
    assert RateLimit.objects.get(pk="tool:rated_ping").taken == 3


def test_a_429_with_retry_after_blocks_the_key_for_every_run() -> None:
    ANSWERS.clear()
    clock = Clock()
    run_id = api.start_run("rated-busy", {"n": 1}).run_id
    with override_settings(RUNLEDGER_RATE_LIMIT_HOLD_SECONDS=5.0):
        outcome = _execute(run_id, clock)  # 429 at T0: retried after 30 s, released
        assert outcome is not None and outcome.status == RunStatus.QUEUED
        row = RateLimit.objects.get(pk="tool:rated_busy")
        assert row.blocked_until == T0 + timedelta(seconds=30) and row.blocked == 1
        # Another run, on any worker, takes no slot before the block ends.
        other = api.start_run("rated-busy", {"n": 2}).run_id
        assert _execute(other, clock) is not None
        assert Run.objects.get(pk=other).status == RunStatus.QUEUED
        assert "next slot in 30 s" in Run.objects.get(pk=other).detail  # after the first's
        assert ANSWERS == ["429"]
        clock.now = T0 + timedelta(seconds=40)
        for rid in (run_id, other):
            _execute(rid, clock)
    assert ANSWERS[0] == "429" and sorted(ANSWERS[1:]) == ["ok 1", "ok 2"]
    assert {r.status for r in Run.objects.all()} == {RunStatus.SUCCEEDED}


@pytest.mark.parametrize(
    ("rate", "why"),
    [
        ("0/min", "a limit of 0"),
        ("ten per minute", "cannot be read"),
        ("10/fortnight", "cannot be read"),
        (10, "a rate is text"),
        ("-5/s", "cannot be read"),
    ],
)
def test_a_bad_rate_is_refused_at_the_declaration(rate: object, why: str) -> None:
    with pytest.raises(AgentDefinitionError, match=why):
        registry.tool(name="rated_bad", rate_limit=rate)(lambda: None)  # type: ignore[arg-type]
    assert registry.get_tool("rated_bad") is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"tool:charge": "0/min"}', r"\['tool:charge'\]: rate '0/min': a limit of 0"),
        ('{"model:haiku": {"requests": "lots"}}', "cannot be read"),
        ('{"charge": "10/min"}', "'tool:<name>' or 'model:<name>'"),
        ('{"tool:charge": {"tokens": "10/min"}}', "only a model has a tokens limit"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_bad_rate_limits_setting_stops_the_start_saying_which_key(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        from_environ({"RUNLEDGER_RATE_LIMITS": value})


def test_the_setting_wins_over_the_declaration_and_limits_models_by_requests_and_tokens() -> None:
    setting = (
        '{"tool:rated_ping": "2/s", '
        '"model:haiku": {"requests": "4000/min", "tokens": "400000/min"}}'
    )
    declared = ratelimited_agents.ping.rate_limit
    (tool,) = ratelimits.takes(
        tool="rated_ping", kind="read", model="", declared=declared, setting=setting
    )
    assert (tool.key, tool.rate.interval) == ("tool:rated_ping", 0.5)
    model = ratelimits.takes(tool="m", kind="model", model="haiku", declared=None, setting=setting)
    assert [(t.row, t.rate.text) for t in model] == [
        ("model:haiku", "4000/min"),
        ("model:haiku#tokens", "400000/min"),
    ]
    assert ratelimits.tokens_used({"usage": {"input_tokens": 120, "output_tokens": 30}}) == 150
    assert ratelimits.tokens_used({"usage": {"total_tokens": 99}}) == 99


@override_settings(
    RUNLEDGER_RATE_LIMITS='{"model:rated-model-x": {"requests": "60/min", "tokens": "600/min"}}',
    RUNLEDGER_RATE_LIMIT_HOLD_SECONDS=30.0,
)
def test_a_models_tokens_are_paid_after_each_call_and_delay_the_next() -> None:
    clock = Clock()
    run_id = api.start_run("rated-model", {"calls": 3}).run_id
    outcome = _execute(run_id, clock)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    # 100 tokens a call at 10 tokens/s: each next call waits 10 s (its request slot, 1 s, less).
    assert clock.now == T0 + timedelta(seconds=20)
    tokens = RateLimit.objects.get(pk="model:rated-model-x#tokens")
    assert tokens.next_at == T0 + timedelta(seconds=30)
    assert RateLimit.objects.get(pk="model:rated-model-x").taken == 3


def test_a_429s_retry_after_is_read_from_the_sdks_and_urllibs_errors() -> None:
    import io
    import urllib.error
    from email.message import Message

    headers = Message()
    headers["Retry-After"] = "Thu, 03 Dec 2026 12:00:30 GMT"
    urllib_429 = urllib.error.HTTPError("https://x", 429, "Too Many", headers, io.BytesIO())
    assert ratelimits.provider_wait(urllib_429, now=T0) == 30.0
    assert ratelimits.provider_wait(ratelimited_agents.TooMany("12")) == 12.0
    ms = ratelimited_agents.TooMany("12")
    ms.response.headers = {"retry-after-ms": "1500"}
    assert ratelimits.provider_wait(ms) == 1.5
    other = urllib.error.HTTPError("https://x", 503, "Down", headers, io.BytesIO())
    assert ratelimits.provider_wait(other) is None  # only a 429 asks everyone to wait
    assert ratelimits.provider_wait(ValueError("no")) is None
