"""Replay is faithful: the agent gets back exactly what the first execution gave it.

PostgreSQL's jsonb stores objects in its own key order (by length, then bytes) and turns an
integral float into an integer; SQLite keeps the text. A value whose repr, key list or digest
the agent uses (a prompt built with ``f"Ship with {offer}?"``) must not change between the
first execution and a replay, or the model step goes stale after every crash. These run on
PostgreSQL and (``-m sqlite_ok``) on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import faults
from ledger import canonical, llm, registry, transitions
from ledger.agents import NOT_HAPPENED, agent, tool
from ledger.models import Run, Step

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

# Keys deliberately out of canonical order, nested, with the number forms jsonb rewrites.
QUOTE = {
    "cents": 330,
    "carrier": "ups",
    "big": 1e20,
    "eta_days": 2.0,
    "ratio": 0.1,
    "Zone": {"z": [1, {"yy": True, "b": None}], "a": "x"},
}
SHIPPED = {"tracking": "1Z999", "at": "2026-11-30T12:00:00+00:00", "box": {"w": 3, "h": 2}}


@pytest.fixture
def faithful_agent() -> Iterator[list[dict[str, Any]]]:
    """An agent that records, per execution, the reprs of everything it was handed."""
    seen: list[dict[str, Any]] = []
    sent: list[str] = []

    @tool(kind="read", name="faithful-quote")
    def quote(sku: str) -> dict[str, Any]:
        return {**QUOTE, "sku": sku}

    def lookup(effect_key: str) -> Any:
        return dict(SHIPPED) if effect_key in sent else NOT_HAPPENED

    @tool(kind="effect", name="faithful-ship", reconcile=lookup)
    def ship(cents: int, *, idempotency_key: str) -> dict[str, Any]:
        sent.append(idempotency_key)
        faults.point("faithful.after_ship")
        return dict(SHIPPED)

    @llm.script("faithful-echo")
    def _echo(prompt: str, system: str) -> dict[str, Any]:
        return {"text": prompt, "words": len(prompt.split())}

    @agent("faithful", tools=[quote, ship])
    def faithful(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        offer = ctx.call(quote, step="quote", sku="box-1")
        both = ctx.parallel({"b": (quote, {"sku": "b"}), "a": (quote, {"sku": "a"})}, step="fan")
        shipped = ctx.call(ship, step="ship", cents=offer["cents"])
        prompt = f"Ship with {offer}? inputs={inputs} both={both} shipped={shipped}"
        answer = ctx.model(prompt, model="scripted:faithful-echo", step="ask")
        seen.append(
            {
                "offer": repr(offer),
                "types": [type(offer[k]).__name__ for k in offer],
                "inputs": repr(inputs),
                "ctx_inputs": repr(ctx.inputs),
                "both": repr(both),
                "shipped": repr(shipped),
                "answer": repr(answer),
                "now": repr(ctx.now(step="at")),
            }
        )
        faults.point("faithful.after_model")
        return {"prompt": prompt, "answer": answer}

    yield seen
    registry.unregister_agent("faithful")


def test_a_result_out_of_jsonb_order_replays_identically_after_a_crash(
    faithful_agent, execute, crash_at
) -> None:
    seen = faithful_agent
    inputs = {"zeta": 1, "alpha": {"k": [3, 2.0], "b": "x"}}
    run = transitions.run_start(agent="faithful", inputs=inputs)
    crash_at("faithful.after_model")
    execute(run.run_id, crash_expected=True)  # everything up to the model step committed
    outcome = execute(run.run_id, worker="worker-2")

    assert outcome.status == "succeeded", outcome.detail
    assert (outcome.replayed, outcome.executed) == (6, 0)  # no stale, nothing ran again
    first, replay = seen
    assert first == replay
    # The agent was handed the canonical form on the first execution too: keys sorted, and
    # an integral float as the integer jsonb gives back.
    assert first["offer"] == repr(canonical.normalize({**QUOTE, "sku": "box-1"}))
    assert first["types"] == ["dict", "int", "str", "int", "int", "float", "str"]
    canonical_inputs = {"alpha": {"b": "x", "k": [3, 2]}, "zeta": 1}
    assert first["inputs"] == first["ctx_inputs"] == repr(canonical_inputs)
    assert first["both"].startswith("{'b': {'Zone'")  # in the order the agent gave its keys
    ask = Step.objects.get(run_id=run.run_id, step_id="ask")
    prompt = outcome.result["prompt"]
    assert ask.prompt_hash == canonical.hash_text(canonical.dumps(["", prompt]))
    assert outcome.result["answer"] == {"text": prompt, "words": len(prompt.split())}


def test_a_reconciled_effect_replays_what_the_lookup_answered(
    faithful_agent, execute, crash_at
) -> None:
    seen = faithful_agent
    run = transitions.run_start(agent="faithful", inputs={})
    crash_at("faithful.after_ship")
    execute(run.run_id, crash_expected=True)  # the shipment went out; its row says started
    crash_at("faithful.after_model")
    execute(run.run_id, worker="worker-2", crash_expected=True)  # settled by the lookup
    outcome = execute(run.run_id, worker="worker-3")

    assert outcome.status == "succeeded", outcome.detail
    reconciled, replay = seen
    assert reconciled == replay
    assert reconciled["shipped"] == repr(canonical.normalize(SHIPPED))
    assert Step.objects.get(run_id=run.run_id, step_id="ship").attempt == 1


def test_a_continuation_is_handed_its_inputs_in_the_canonical_order(execute) -> None:
    seen: list[str] = []

    @agent("faithful-continue", tools=[])
    def carry_on(ctx: Any, inputs: dict[str, Any]) -> Any:
        seen.append(repr(inputs))
        if inputs.get("round") == 1:
            ctx.continue_as_new({"zz": [{"y": 1, "b": 2}], "round": 2, "a": 1.0})
        return inputs

    try:
        run = transitions.run_start(agent="faithful-continue", inputs={"round": 1, "b": 0})
        first = execute(run.run_id)
        child = execute(first.continued_as)
    finally:
        registry.unregister_agent("faithful-continue")
    assert seen == [
        repr({"b": 0, "round": 1}),
        repr({"a": 1, "round": 2, "zz": [{"b": 2, "y": 1}]}),
    ]
    assert child.status == "succeeded"
    assert Run.objects.get(pk=first.continued_as).parent_id == run.run_id


def test_a_settled_result_is_handed_over_in_the_canonical_order(execute, crash_at) -> None:
    seen: list[str] = []

    @tool(kind="effect", name="faithful-post")
    def post(text: str, *, idempotency_key: str) -> dict[str, Any]:
        faults.point("faithful.after_post")
        return {"posted": text}

    @agent("faithful-settled", tools=[post])
    def settled(ctx: Any, inputs: Any) -> Any:
        answer = ctx.call(post, step="post", text="hi")
        seen.append(repr(answer))
        return answer

    try:
        run = transitions.run_start(agent="faithful-settled", inputs={})
        crash_at("faithful.after_post")
        execute(run.run_id, crash_expected=True)
        blocked = execute(run.run_id, worker="worker-2")  # no read path: a person settles
        assert (blocked.status, blocked.reason) == ("needs_attention", "reconciliation")
        step = Step.objects.get(run_id=run.run_id, step_id="post")
        proposal = transitions.settlement_propose(
            step=step,
            outcome="happened",
            result={"zz": 1, "ref": {"y": 2, "b": [{"k": 1, "a": 0}]}, "a": 3.0},
            reason="seen in the channel",
            by="olivia",
            seen_version=step.version,
        )
        transitions.settlement_approve(settlement=proposal, by="arthur", reason="checked")
        outcome = execute(run.run_id, worker="worker-3")
    finally:
        registry.unregister_agent("faithful-settled")
    assert outcome.status == "succeeded"
    assert seen == [repr({"a": 3, "ref": {"b": [{"a": 0, "k": 1}], "y": 2}, "zz": 1})]
