"""Tokens and cost (issue 35, item 6): a model step records the tokens its answer reports and
their cost at the price table; the run page, the runs list, Trends and the API add them up per
run and per agent. The answers come from the REAL ``anthropic`` and ``openai`` SDKs talking to
a model provider on loopback that reports known usage (``tests/support/llm_wire.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from ledger import transitions, usage
from ledger.conf import from_environ
from ledger.models import Step
from tests.support.dashboard_runs import restore_roles, rewind, signed_in
from tests.support.llm_wire import WireModel, _usage

pytest.importorskip("anthropic")
pytest.importorskip("openai")

pytestmark = pytest.mark.django_db(transaction=True)

#: The refund loop's models (ledger.examples.agents.refund_loop) and their shipped prices.
MODELS = {"anthropic": ("claude-haiku-4-5", 1.0, 5.0), "openai": ("gpt-4.1-mini", 0.4, 1.6)}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireModel]:
    with WireModel() as served:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", served.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield served


def usd(tokens_in: int, tokens_out: int, price_in: float, price_out: float) -> Decimal:
    return (Decimal(repr(tokens_in * price_in + tokens_out * price_out)) / 10**6).quantize(
        Decimal("0.000001")
    )


def refund_loop(api: str, execute: Any) -> str:
    run = transitions.run_start(
        agent="refund_loop", inputs={"invoice_ids": ["inv_1001", "inv_1003"], "api": api}
    )
    assert execute(run.run_id).status == "succeeded"
    return run.run_id


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_loops_model_steps_record_tokens_and_cost_and_every_view_adds_them_up(
    api: str, model: WireModel, execute: Any, caller: Any, clock: Any
) -> None:
    rewind(clock)  # the steps finish two hours ago: inside Trends' 24 h window
    run_id = refund_loop(api, execute)
    name, price_in, price_out = MODELS[api]
    reported = [_usage(body) for _, body in model.requests]
    assert len(reported) == 4 and all(t_in > 0 for t_in, _ in reported)

    steps = list(Step.objects.filter(run_id=run_id, kind="model").order_by("seq"))
    assert [(s.tokens_in, s.tokens_out) for s in steps] == reported
    assert [s.cost_usd for s in steps] == [usd(*t, price_in, price_out) for t in reported]
    assert {s.model_id for s in steps} == {name}
    assert Step.objects.filter(run_id=run_id).exclude(kind="model")[0].tokens_in is None
    tokens_in, tokens_out = sum(t for t, _ in reported), sum(t for _, t in reported)
    cost = sum(usd(*t, price_in, price_out) for t in reported)
    expected = {
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost_usd": float(cost),
        "model_steps": 4,
        "unpriced": 0,
    }

    reader = caller("viewer")
    assert reader.get(f"/api/v1/runs/{run_id}").json()["usage"] == expected
    listed = reader.get("/api/v1/runs?agent=refund_loop").json()["runs"]
    assert [r["usage"] for r in listed] == [expected]
    step_rows = reader.get(f"/api/v1/runs/{run_id}/steps").json()["steps"]
    turn = next(s for s in step_rows if s["step_id"] == "chat.turn.1")
    assert (turn["tokens_in"], turn["tokens_out"], turn["model_id"]) == (*reported[0], name)
    assert turn["cost_usd"] == float(usd(*reported[0], price_in, price_out))
    agents = reader.get("/api/v1/agents/usage?window=24h").json()
    assert agents["agents"] == [{"agent": "refund_loop", "runs": 1, "usage": expected}]
    assert agents["total"]["usage"] == expected

    restore_roles()
    viewer = signed_in("viewer")
    shown = f"${cost:.4f}"
    page = viewer.get(f"/runs/{run_id}/").content.decode()
    header = page[page.index('id="run-usage"') :][:600]
    assert shown in header and f"{tokens_in} in · {tokens_out} out, 4 model steps" in header
    assert f"{reported[0][0]} in · {reported[0][1]} out tokens" in page
    assert shown in viewer.get("/?agent=refund_loop").content.decode()
    trends = viewer.get("/trends/").content.decode()
    usage_table = trends[trends.index('id="trend-usage"') :]
    assert "refund_loop" in usage_table and shown in usage_table


def test_the_price_table_is_a_setting_and_an_unknown_model_keeps_its_tokens_without_a_cost(
    model: WireModel, execute: Any, caller: Any, settings: Any
) -> None:
    # A deployment's own price for the Claude model, and the shipped GPT-4.1 prices taken away.
    settings.RUNLEDGER_MODEL_PRICES = json.dumps(
        {"claude-haiku-4-5": {"input": 2, "output": 10}, "gpt-4.1*": None, "gpt-4.1-mini*": None}
    )
    run_id = refund_loop("anthropic", execute)
    step = Step.objects.get(run_id=run_id, step_id="chat.turn.1")
    assert step.cost_usd == usd(step.tokens_in, step.tokens_out, 2, 10)

    unpriced = refund_loop("openai", execute)
    rows = list(Step.objects.filter(run_id=unpriced, kind="model"))
    assert len(rows) == 4
    assert all(r.tokens_in and r.tokens_out == 25 and r.cost_usd is None for r in rows)
    run_usage = caller("viewer").get(f"/api/v1/runs/{unpriced}").json()["usage"]
    assert run_usage["cost_usd"] is None and run_usage["unpriced"] == 4
    assert run_usage["tokens_in"] == sum(r.tokens_in or 0 for r in rows)
    restore_roles()
    page = signed_in("viewer").get(f"/runs/{unpriced}/").content.decode()
    assert "4 steps of a model with no price" in page


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"m": [1]}',
        '{"m": [1, -2]}',
        '{"m": {"input": 1}}',
        '{"m": ["1", 2]}',
        '{"m": [true, 2]}',
    ],
)
def test_a_malformed_price_table_is_refused_at_start_up_saying_which_entry(text: str) -> None:
    with pytest.raises(ValueError, match="RUNLEDGER_MODEL_PRICES"):
        from_environ({"RUNLEDGER_MODEL_PRICES": text})


def test_tokens_are_read_from_every_shape_the_ledger_records_and_never_raise() -> None:
    assert usage.tokens_of({"usage": {"input_tokens": 10, "output_tokens": 3}}) == (10, 3)
    assert usage.tokens_of({"usage": {"prompt_tokens": 7, "completion_tokens": 2}}) == (7, 2)
    cached = {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}
    assert usage.tokens_of({"message": {"usage": cached}, "stream": False}) == (105, 1)
    older = {"response": {"usage": {"request_tokens": 4, "response_tokens": 9}}}
    assert usage.tokens_of(older) == (4, 9)
    events = [
        ["message_start", {"message": {"usage": {"input_tokens": 12, "output_tokens": 1}}}],
        ["content_block_delta", {"delta": {"text": "hi"}}],
        ["message_delta", {"usage": {"output_tokens": 40}}],
    ]
    assert usage.tokens_of({"stream": True, "events": events}) == (12, 40)
    odd_answers: list[Any] = [
        None,
        "text",
        [1],
        {"usage": "many"},
        {"usage": {"input_tokens": -1}},
        {"events": [["message_start", None]]},
        {"usage": {"input_tokens": True}},
    ]
    for odd in odd_answers:
        assert usage.tokens_of(odd) == (None, None), odd
    assert usage.cost_of("scripted:echo", 10, 10, usage.price_table("")) is None
    assert usage.price_of("claude-opus-4-5-20251101", usage.DEFAULT_PRICES) == (5.0, 25.0)
    assert usage.price_of("claude-opus-4-1", usage.DEFAULT_PRICES) == (15.0, 75.0)
