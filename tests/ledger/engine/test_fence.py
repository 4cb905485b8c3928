"""The effect fence in one process: the deadline, the previous holder's window, the fencing
token a tool receives, and the provider that refuses a stale one.

The worker-process side (SIGSTOP in each window, three providers) is
tests/ledger/engine/test_effect_fencing.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from ledger import registry, selectors, transitions
from ledger.agents import NOT_HAPPENED, agent, tool
from ledger.engine.fence import LeaseExpired, LeaseFence
from ledger.errors import AgentDefinitionError
from ledger.examples import simulators
from ledger.examples.models import ProviderCharge, ProviderFence
from ledger.models import Run

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def fence(*, sent_at: float, lease: float = 30.0, margin: float = 5.0) -> LeaseFence:
    return LeaseFence(run_id="r", token=1, lease_seconds=lease, margin=margin, sent_at=sent_at)


def test_an_effect_may_leave_only_before_the_deadline_of_the_last_confirmed_renewal() -> None:
    fresh = fence(sent_at=time.monotonic())  # 25 s to spare
    fresh.check("pay")
    stale = fence(sent_at=time.monotonic() - 26)  # claimed 26 s ago, never renewed
    with pytest.raises(LeaseExpired, match="'pay' not sent"):
        stale.check("pay")
    stale.confirmed(sent_at=time.monotonic())  # a renewal sent now was confirmed
    stale.check("pay")
    stale.confirmed(sent_at=time.monotonic() - 100)  # a late confirmation never moves it back
    stale.check("pay")
    stale.revoked()  # a refused renewal ends it
    assert stale.deadline == -math.inf
    with pytest.raises(LeaseExpired):
        stale.check("pay")


def test_a_takeover_waits_until_the_previous_lease_expiry_plus_the_margin(clock) -> None:
    f = fence(sent_at=time.monotonic(), margin=5.0)
    f.after_previous_holder(prior_expiry=clock() - timedelta(seconds=2), now=clock(), at=100.0)
    assert f.quiet_at == 103.0  # expired 2 s ago: 3 s of the margin are left
    f.after_previous_holder(prior_expiry=clock() - timedelta(hours=1), now=clock(), at=100.0)
    assert f.quiet_at == 100.0  # long over: no wait
    f.quiet_at = -math.inf
    f.after_previous_holder(prior_expiry=None, now=clock(), at=100.0)
    assert f.quiet_at == -math.inf  # nobody held it before


def test_taking_a_lease_from_a_holder_that_may_be_alive_keeps_its_expiry(clock) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert transitions.lease_claim(run_id=run.run_id, owner="a", seconds=30, clock=clock)
    first_expiry = clock() + timedelta(seconds=30)
    clock.advance(31)
    assert transitions.lease_claim(run_id=run.run_id, owner="b", seconds=30, clock=clock)
    run.refresh_from_db()
    assert (run.executions, run.prior_lease_expires_at) == (2, first_expiry)

    second_expiry = clock() + timedelta(seconds=30)
    clock.advance(31)
    [lease] = selectors.runs_with_expired_leases(now=clock())
    assert transitions.run_requeue_expired(lease=lease, clock=clock)  # the sweep
    run.refresh_from_db()
    assert (run.lease_expires_at, run.prior_lease_expires_at) == (None, second_expiry)
    assert transitions.lease_claim(run_id=run.run_id, owner="c", seconds=30, clock=clock)
    run.refresh_from_db()  # a released lease leaves the kept expiry alone
    assert (run.executions, run.prior_lease_expires_at) == (3, second_expiry)

    third_expiry = run.lease_expires_at
    transitions.run_cancel(run_id=run.run_id, by="test", reason="stop", seen_version=None)
    run.refresh_from_db()
    assert (run.status, run.prior_lease_expires_at) == ("cancelled", third_expiry)


@pytest.fixture
def token_agent() -> Iterator[list[tuple[str, int | None]]]:
    seen: list[tuple[str, int | None]] = []

    def lookup(effect_key: str, fencing_token: int | None = None) -> Any:
        seen.append(("lookup", fencing_token))
        return NOT_HAPPENED

    @tool(kind="effect", name="token-pay", reconcile=lookup)
    def pay(cents: int, *, idempotency_key: str, fencing_token: int | None = None) -> Any:
        seen.append(("send", fencing_token))
        return simulators.provider_charge(
            customer="cus_t",
            amount_cents=cents,
            idempotency_key=idempotency_key,
            fencing_token=fencing_token,
        )

    @agent("token-test", tools=[pay])
    def token_test(ctx: Any, inputs: Any) -> Any:
        return ctx.call(pay, step="pay", cents=5)

    yield seen
    registry.unregister_agent("token-test")


def test_the_fencing_token_reaches_the_tool_and_grows_with_every_takeover(
    token_agent, execute, crash_at
) -> None:
    run = transitions.run_start(agent="token-test", inputs={})
    crash_at("charge.before_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded"
    assert token_agent == [("send", 1), ("lookup", 2), ("send", 2)]
    assert ProviderCharge.objects.count() == 1
    assert ProviderFence.objects.get().token == 2
    assert Run.objects.get(pk=run.run_id).executions == 2


def test_the_fencing_token_is_not_part_of_the_tool_schema() -> None:
    def plain(x: int, *, idempotency_key: str) -> None: ...

    def fenced(x: int, *, idempotency_key: str, fencing_token: int | None = None) -> None: ...

    assert tool(kind="effect", name="s1")(plain).schema()["params"] == ["x"]
    assert tool(kind="effect", name="s2")(fenced).schema()["params"] == ["x"]
    with pytest.raises(AgentDefinitionError, match="only effects get a fencing_token"):
        tool(kind="read", name="s3")(lambda fencing_token: None)


def test_the_payment_provider_refuses_a_lower_fencing_token_under_a_key() -> None:
    key = "run:pay"
    assert simulators.provider_lookup(key, fencing_token=3) is NOT_HAPPENED  # raises the fence
    with pytest.raises(simulators.StaleFencingToken):
        simulators.provider_charge(
            customer="c", amount_cents=1, idempotency_key=key, fencing_token=2
        )
    assert simulators.provider_lookup(key, fencing_token=2) is None  # no answer to act on
    charge = simulators.provider_charge(
        customer="c", amount_cents=1, idempotency_key=key, fencing_token=3
    )
    again = simulators.provider_charge(
        customer="c", amount_cents=1, idempotency_key=key, fencing_token=4
    )
    assert charge == again and ProviderCharge.objects.count() == 1
    assert ProviderFence.objects.values_list("token", "refused").get() == (4, 2)
