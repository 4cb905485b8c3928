"""Agents for the in-flight kill test (tests/runs/operations/test_inflight_kill.py): a read, a
model answer and a payment per run, where the payment provider is a file the test can count.

The provider appends one line per request it *receives* (``sent.log``: the effect key), so a
payment sent twice under one key is two lines, whatever the provider would have deduplicated.
Its lookup answers by key from the same file. The payment waits on a gate file either before it
sends (``phase="before"``: the crash finds the intent written and nothing sent) or after
(``phase="after"``: sent, its result not yet recorded) — the two cases a resume must tell apart
by the lookup alone — or the read before it waits (``phase="read"``: a worker frozen before its
effect, which must never send it once it wakes without its lease). Entering the effect leaves a
marker, so the test knows when a run is inside it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from ledger import llm
from ledger.agents import NOT_HAPPENED, agent, tool

NAME = "inflight-pay"
ASYNC_NAME = "inflight-pay-async"


def _folder() -> Path:
    """The provider's folder: the gate, the markers and ``sent.log`` (set by the test)."""
    return Path(os.environ["RUNLEDGER_TEST_INFLIGHT_DIR"])


def _wait_for_gate() -> None:
    while not (_folder() / "gate").exists():
        time.sleep(0.05)


def lookup_payment(effect_key: str) -> Any:
    """The provider's read path: the payment sent under ``effect_key``, or NOT_HAPPENED."""
    if effect_key in sent_keys():
        return {"paid": effect_key}
    return NOT_HAPPENED


def sent_keys(folder: Path | None = None) -> list[str]:
    """Every request the provider received, in order (a key twice: sent twice)."""
    sent = (folder or _folder()) / "sent.log"
    return sent.read_text().split() if sent.exists() else []


@tool(kind="effect", reconcile=lookup_payment)
def pay(run: str, amount: int, phase: str, *, idempotency_key: str) -> dict[str, Any]:
    (_folder() / f"entered.{run}").touch()
    if phase == "before":
        _wait_for_gate()
    with open(_folder() / "sent.log", "a") as sent:  # one short write per request: O_APPEND
        sent.write(idempotency_key + "\n")
    if phase == "after":
        _wait_for_gate()
    return {"paid": idempotency_key}


@tool(kind="read")
def fetch_amount(run: str, phase: str) -> dict[str, Any]:
    """A read; ``phase="read"`` makes it wait on the gate (a worker frozen inside a read)."""
    if phase == "read":
        (_folder() / f"reading.{run}.{os.getpid()}").touch()
        _wait_for_gate()
    return {"run": run, "amount": sum(map(ord, run)) % 1000}


@llm.script("inflight-approve")
def _approve(prompt: str, system: str) -> dict[str, Any]:
    return {"text": "approve " + prompt}


@agent(NAME, tools=[fetch_amount, pay], max_resumes=5)
def inflight_pay(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    run = inputs["run"]
    amount = ctx.call(fetch_amount, step="fetch", run=run, phase=inputs["phase"])["amount"]
    verdict = ctx.model(f"{run} {amount}", model="scripted:inflight-approve", step="approve")
    paid = ctx.call(pay, step="pay", run=run, amount=amount, phase=inputs["phase"])
    return {"run": run, "amount": amount, "verdict": verdict["text"], "paid": paid["paid"]}


def expected(run: str) -> dict[str, Any]:
    """What an uninterrupted run of ``run`` returns (but for the key, read from the ledger)."""
    amount = sum(map(ord, run)) % 1000
    return {"run": run, "amount": amount, "verdict": f"approve {run} {amount}"}


# --- the async twin: the same steps, awaited; its payment and read wait on the event loop ----


async def _await_gate() -> None:
    while not (_folder() / "gate").exists():
        await asyncio.sleep(0.05)


@tool(kind="effect", reconcile=lookup_payment, name="apay")
async def apay(run: str, amount: int, phase: str, *, idempotency_key: str) -> dict[str, Any]:
    (_folder() / f"entered.{run}").touch()
    if phase == "before":
        await _await_gate()
    with open(_folder() / "sent.log", "a") as sent:
        sent.write(idempotency_key + "\n")
    if phase == "after":
        await _await_gate()
    return {"paid": idempotency_key}


@tool(kind="read", name="afetch_amount")
async def afetch_amount(run: str, phase: str) -> dict[str, Any]:
    if phase == "read":
        (_folder() / f"reading.{run}.{os.getpid()}").touch()
        await _await_gate()
    return {"run": run, "amount": sum(map(ord, run)) % 1000}


@agent(ASYNC_NAME, tools=[afetch_amount, apay], max_resumes=5)
async def inflight_pay_async(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    run = inputs["run"]
    fetched = await ctx.call(afetch_amount, step="fetch", run=run, phase=inputs["phase"])
    amount = fetched["amount"]
    verdict = await ctx.model(f"{run} {amount}", model="scripted:inflight-approve", step="approve")
    paid = await ctx.call(apay, step="pay", run=run, amount=amount, phase=inputs["phase"])
    return {"run": run, "amount": amount, "verdict": verdict["text"], "paid": paid["paid"]}
