"""Agents whose tools are rate-limited, for the rate-limit tests: loaded by the test process and
by the real workers (``RUNLEDGER_AGENT_MODULES``). ``rated`` calls a tool limited to 10/min that
posts each call to a loopback downstream (which counts them), ``calls`` times."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from ledger.agents import RunContext, agent, tool


@tool(kind="read", name="rated_ping", rate_limit="10/min")
def ping(n: int, url: str, key: str) -> dict[str, Any]:
    """One call to the downstream (``url``; none: only recorded)."""
    if url:
        request = urllib.request.Request(
            url,
            data=json.dumps({"n": n}).encode(),
            headers={"Content-Type": "application/json", "Idempotency-Key": key},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
    return {"n": n}


@agent("rated", tools=[ping])
def rated(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """``calls`` calls of the limited tool, one after another."""
    url = inputs.get("url", "")
    for n in range(int(inputs.get("calls", 1))):
        ctx.call(ping, step=f"ping.{n}", n=n, url=url, key=f"{ctx.run_id}:{n}")
    return {"calls": int(inputs.get("calls", 1))}


#: What ``rated_busy`` answered, in order: the test reads it.
ANSWERS: list[str] = []


class TooMany(Exception):
    """A provider's 429, as an SDK raises it: a status and the answer's headers."""

    def __init__(self, retry_after: str) -> None:
        self.status_code = 429
        self.response = type(
            "Answer", (), {"status_code": 429, "headers": {"retry-after": retry_after}}
        )()
        super().__init__(f"429 Too Many Requests (retry-after {retry_after})")


@tool(kind="read", name="rated_busy", rate_limit="60/min", retries=2, backoff=0.0, jitter=0.0)
def busy(n: int) -> dict[str, Any]:
    """Answers 429 with retry-after 30 the first time, then succeeds."""
    if not ANSWERS:
        ANSWERS.append("429")
        raise TooMany("30")
    ANSWERS.append(f"ok {n}")
    return {"n": n}


@agent("rated-busy", tools=[busy])
def rated_busy(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    return ctx.call(busy, step="busy", n=int(inputs.get("n", 0)))


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """A model's answer that used 100 tokens."""
    return {"text": "ok", "usage": {"input_tokens": 80, "output_tokens": 20}}


@agent("rated-model", tools=[])
def rated_model(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """``calls`` model requests to ``rated-model-x``, one after another."""
    for n in range(int(inputs.get("calls", 2))):
        ctx.model_request({"n": n}, send=_answer, model="rated-model-x", step=f"ask.{n}")
    return {"done": True}
