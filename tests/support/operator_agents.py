"""Agents, tools and helpers of the operator-action tests (the agents register on import)."""

from __future__ import annotations

from typing import Any

from harness import faults
from ledger.agents import agent, tool
from ledger.examples import simulators
from ledger.models import Run, Step

# --- test agents ------------------------------------------------------------------------------

#: What the "maybe" tool's reconcile answers: "unknown" (None) or "ask" (the provider's lookup).
LOOKUP = {"mode": "unknown"}
#: Knobs of the chain agent: changing SALT makes step "b" stale; FACTOR changes b's result.
CHAIN = {"salt": "v1", "factor": 2}


@tool(kind="effect", name="ops-blind-charge")
def blind_charge(customer: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """A charge through the provider, registered without a read path."""
    return simulators.provider_charge(
        customer=customer, amount_cents=amount_cents, idempotency_key=idempotency_key
    )


@agent("ops-blind", tools=[blind_charge])
def blind(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    charge = ctx.call(blind_charge, step="charge", customer="cus_blind", amount_cents=inputs["n"])
    return {"charge_id": charge["charge_id"]}


def _maybe_lookup(key: str) -> Any:
    return None if LOOKUP["mode"] == "unknown" else simulators.provider_lookup(key)


@tool(kind="effect", name="ops-maybe-charge", reconcile=_maybe_lookup)
def maybe_charge(customer: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """A charge whose lookup sometimes cannot answer."""
    return simulators.provider_charge(
        customer=customer, amount_cents=amount_cents, idempotency_key=idempotency_key
    )


@agent("ops-maybe", tools=[maybe_charge])
def maybe(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    charge = ctx.call(maybe_charge, step="charge", customer="cus_maybe", amount_cents=inputs["n"])
    return {"charge_id": charge["charge_id"]}


@tool(kind="read", name="ops-source")
def source(n: int) -> int:
    return n


@tool(kind="read", name="ops-scale")
def scale(v: int, salt: str) -> int:
    faults.point(f"ops.scale.{salt}")
    return v * int(CHAIN["factor"])


@tool(kind="effect", name="ops-pay", reconcile=simulators.provider_lookup)
def pay(amount: int, *, idempotency_key: str) -> dict[str, Any]:
    return simulators.provider_charge(
        customer="cus_chain", amount_cents=amount, idempotency_key=idempotency_key
    )


@agent("ops-chain", tools=[source, scale, pay])
def chain(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """a → b (stale when SALT changes) → pay (effect) → c → d."""
    x = ctx.call(source, step="a", n=inputs["n"])
    y = ctx.call(scale, step="b", v=x, salt=CHAIN["salt"])
    paid = ctx.call(pay, step="pay", amount=y)
    z = ctx.call(scale, step="c", v=paid["amount_cents"], salt="c")
    return {"y": y, "z": ctx.call(scale, step="d", v=z, salt="d")}


def step_of(run: Run | str, step_id: str) -> Step:
    run_id = run if isinstance(run, str) else run.run_id
    return Step.objects.get(run_id=run_id, step_id=step_id)


def stopped_stale(execute: Any, crash_at: Any) -> Run:
    """A chain run that crashed at d, then resumed under a changed salt: stale at b (the
    ``execute`` and ``crash_at`` fixtures of tests/conftest.py)."""
    from ledger import transitions
    from ledger.examples.models import ProviderCharge

    run = transitions.run_start(agent="ops-chain", inputs={"n": 21})
    crash_at("ops.scale.d")
    execute(run.run_id, crash_expected=True)
    assert ProviderCharge.objects.count() == 1
    CHAIN["salt"] = "v2"
    outcome = execute(run.run_id, worker="worker-2")
    assert (outcome.status, outcome.reason, outcome.step_id) == ("needs_attention", "stale", "b")
    run.refresh_from_db()
    return run
