"""Agents that sleep and wait for events (issue 33), sync and async alike: loaded by the test
process and by the real workers (``RUNLEDGER_AGENT_MODULES``). Each counts its executions of
the code after a wait in a file named in its inputs (``marks``), so that every process sees
how often the code after a sleep or an event ran."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from ledger.agents import AsyncRunContext, RunContext, agent, tool


def _mark(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


@tool(kind="read", name="wait_mark")
def mark(path: str, text: str) -> str:
    """Appends ``text`` to ``path``: a read, so a replay does not mark again."""
    _mark(path, text)
    return text


@agent("sleeper", tools=[mark], max_resumes=3)
def sleeper(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    ctx.call(mark, path=inputs["marks"], text="before", step="before")
    if "until" in inputs:
        ctx.sleep_until(datetime.fromisoformat(inputs["until"]), step="nap")
    else:
        ctx.sleep(inputs["seconds"], step="nap")
    ctx.call(mark, path=inputs["marks"], text="after", step="after")
    return {"slept": True}


@agent("sleeper-async", tools=[mark], max_resumes=3)
async def sleeper_async(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    await ctx.call(mark, path=inputs["marks"], text="before", step="before")
    if "until" in inputs:
        await ctx.sleep_until(datetime.fromisoformat(inputs["until"]), step="nap")
    else:
        await ctx.sleep(inputs["seconds"], step="nap")
    await ctx.call(mark, path=inputs["marks"], text="after", step="after")
    return {"slept": True}


@agent("listener", tools=[mark], max_resumes=5)
def listener(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    got = []
    for i in range(inputs["count"]):
        payload = ctx.wait_for_event(
            inputs.get("name", "reply"),
            timeout=inputs.get("timeout"),
            default="timed out",
            step=f"reply.{i}",
        )
        got.append(payload)
        ctx.call(mark, path=inputs["marks"], text=f"got {i}", step=f"got.{i}")
    return {"got": got}


@agent("listener-async", tools=[mark], max_resumes=5)
async def listener_async(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    got = []
    for i in range(inputs["count"]):
        payload = await ctx.wait_for_event(
            inputs.get("name", "reply"),
            timeout=inputs.get("timeout"),
            default="timed out",
            step=f"reply.{i}",
        )
        got.append(payload)
        await ctx.call(mark, path=inputs["marks"], text=f"got {i}", step=f"got.{i}")
    return {"got": got}


def marks(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


#: What the asker asks for: a decision and an optional note.
DECISION = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the refund"},
        "note": {"type": "string", "maxLength": 200},
    },
    "required": ["approve"],
    "additionalProperties": False,
}


@agent("asker", tools=[mark], max_resumes=2)
def asker(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    answer = ctx.ask(
        f"Refund {inputs.get('invoice', 'inv_1')}?",
        schema=DECISION,
        role=inputs.get("role", "operator"),
        timeout=inputs.get("timeout"),
        default="no answer",
        step="ask",
    )
    ctx.call(mark, path=inputs["marks"], text="answered", step="after")
    return {"answer": answer}


@agent("asker-async", tools=[mark], max_resumes=2)
async def asker_async(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    answer = await ctx.ask(
        f"Refund {inputs.get('invoice', 'inv_1')}?",
        schema=DECISION,
        role=inputs.get("role", "operator"),
        timeout=inputs.get("timeout"),
        default="no answer",
        step="ask",
    )
    await ctx.call(mark, path=inputs["marks"], text="answered", step="after")
    return {"answer": answer}


@agent("concierge", tools=[mark], max_resumes=2)
def concierge(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Emits its progress, takes the customer's reply from its mailbox, then asks a person:
    the run page's stream, mailbox and question at once."""
    ctx.emit("progress", {"stage": "reading the ticket", "ticket": inputs["ticket"]})
    reply = ctx.wait_for_event("customer_reply", timeout=inputs.get("timeout"), step="reply")
    ctx.emit("progress", {"stage": "asking a person", "reply": reply})
    answer = ctx.ask(
        f"Refund {inputs['invoice']} for {inputs['customer']}?",
        schema=DECISION,
        role="operator",
        step="ask",
    )
    ctx.emit("progress", {"stage": "done", "approved": answer["approve"]})
    return {"reply": reply, "answer": answer}
