"""The agent ``bench_workers`` runs on real workers: ``inputs["steps"]`` durable read steps."""

from __future__ import annotations

from typing import Any

from ledger.agents import agent, tool


@tool(kind="read", name="bench-worker-read")
def bench_read(i: int) -> dict[str, int]:
    return {"i": i}


@agent("bench-steps", tools=[bench_read])
def bench_steps(ctx: Any, inputs: dict[str, Any]) -> int:
    for i in range(int(inputs["steps"])):
        ctx.call(bench_read, step=f"s{i}", i=i)
    return int(inputs["steps"])
