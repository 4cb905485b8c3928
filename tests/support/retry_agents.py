"""Agents whose tools fail on purpose, for the retry tests: loaded by the test process and by
the real workers (``RUNLEDGER_AGENT_MODULES``). A tool's attempts are counted in a file named in
the inputs, so that every process sees the same count."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ledger.agents import RunContext, agent, tool
from ledger.errors import RetryAfter


def count_attempt(path: str) -> int:
    """Append one line to ``path`` and return how many it holds now (this attempt's number)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, b"x\n")
    finally:
        os.close(fd)
    return len(Path(path).read_text().splitlines())


@tool(kind="read", name="retry_rate_limited", retries=2, backoff=0.01, backoff_max=0.05)
def rate_limited(counter: str, fails: int, retry_after: float) -> dict[str, Any]:
    """Raises ``RetryAfter(retry_after)`` on its first ``fails`` attempts, then answers."""
    attempt = count_attempt(counter)
    if attempt <= fails:
        raise RetryAfter(retry_after, f"rate limited on attempt {attempt}")
    return {"attempt": attempt, "pid": os.getpid()}


@tool(kind="read", name="retry_quick")
def quick(n: int) -> dict[str, Any]:
    return {"n": n, "pid": os.getpid()}


@agent("retry-later", tools=[rate_limited], max_resumes=3)
def retry_later(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """One read that is rate limited a few times, then answers."""
    return ctx.call(
        rate_limited,
        step="limited",
        counter=inputs["counter"],
        fails=inputs["fails"],
        retry_after=inputs["retry_after"],
    )


@agent("retry-quick", tools=[quick])
def retry_quick(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    return ctx.call(quick, step="quick", n=inputs["n"])
