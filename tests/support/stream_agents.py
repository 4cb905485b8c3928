"""Agents for the stream and cancel tests (tests/runs/operations/test_stream_workers.py,
tests/ledger/engine/test_emit.py): a run that emits progress between reads, one of which can
hold on a gate file (so that a worker is SIGKILLed mid-run), and a run inside a model call of
30 s (so that a cancel must end it at once). Sync and async twins.

The folder (markers, the gate) is ``RUNLEDGER_TEST_STREAM_DIR``; without it nothing waits.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from ledger import llm
from ledger.agents import agent, tool

NAME = "stream-progress"
ASYNC_NAME = "stream-progress-async"
SLOW = "stream-slow-model"
ASYNC_SLOW = "stream-slow-model-async"
#: How long the slow model takes to answer (the cancel must not wait for it).
SLOW_SECONDS = 30.0


def _folder() -> Path | None:
    folder = os.environ.get("RUNLEDGER_TEST_STREAM_DIR")
    return Path(folder) if folder else None


def _mark(name: str) -> None:
    folder = _folder()
    if folder is not None:
        (folder / f"{name}.{os.getpid()}").touch()


def _held(i: int, hold_at: int) -> bool:
    folder = _folder()
    return folder is not None and i == hold_at and not (folder / "gate").exists()


@tool(kind="read")
def work(i: int, hold_at: int) -> dict[str, Any]:
    """Step ``i``; at ``hold_at`` it waits for the gate (the test kills the worker there)."""
    if i == hold_at:
        _mark("holding")
    while _held(i, hold_at):
        time.sleep(0.05)
    return {"i": i, "square": i * i}


@agent(NAME, tools=[work], max_resumes=5)
def stream_progress(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    total = 0
    for i in range(inputs["steps"]):
        ctx.emit("progress", {"i": i, "of": inputs["steps"]})
        total += ctx.call(work, i=i, hold_at=inputs.get("hold_at", -1))["square"]
    ctx.emit("done", {"total": total})
    return {"total": total}


@tool(kind="read", name="awork")
async def awork(i: int, hold_at: int) -> dict[str, Any]:
    if i == hold_at:
        _mark("holding")
    while _held(i, hold_at):
        await asyncio.sleep(0.05)
    return {"i": i, "square": i * i}


@agent(ASYNC_NAME, tools=[awork], max_resumes=5)
async def stream_progress_async(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    total = 0
    for i in range(inputs["steps"]):
        await ctx.emit("progress", {"i": i, "of": inputs["steps"]})
        total += (await ctx.call(awork, i=i, hold_at=inputs.get("hold_at", -1)))["square"]
    await ctx.emit("done", {"total": total})
    return {"total": total}


@llm.script("stream-slow")
def _slow(prompt: str, system: str) -> dict[str, Any]:
    _mark("model")
    time.sleep(SLOW_SECONDS)
    return {"text": "slow " + prompt}


@llm.script("stream-slow-async")
async def _aslow(prompt: str, system: str) -> dict[str, Any]:
    _mark("model")
    await asyncio.sleep(SLOW_SECONDS)
    return {"text": "slow " + prompt}


@agent(SLOW, max_resumes=5)
def slow_model(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    ctx.emit("asking", {"prompt": inputs["prompt"]})
    try:
        answer = ctx.model(inputs["prompt"], model="scripted:stream-slow", step="ask")
    finally:
        _mark("finally")  # a cancel still runs the agent's own clean-up
    return {"answer": answer["text"], "cancelled": ctx.cancelled}


@agent(ASYNC_SLOW, max_resumes=5)
async def slow_model_async(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    await ctx.emit("asking", {"prompt": inputs["prompt"]})
    try:
        answer = await ctx.model(inputs["prompt"], model="scripted:stream-slow-async", step="ask")
    finally:
        _mark("finally")
    return {"answer": answer["text"], "cancelled": ctx.cancelled}
