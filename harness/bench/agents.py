"""The benchmarks' agents: ``bench-steps``, which ``bench_workers`` runs on real workers
(``inputs["steps"]`` durable read steps), and ``bench_agent``, the timed agents of
``bench_engine`` and ``bench_levers``."""

from __future__ import annotations

import threading
import time
from typing import Any

from ledger import llm
from ledger.agents import agent, tool
from ledger.registry import Durability


@tool(kind="read", name="bench-worker-read")
def bench_read(i: int) -> dict[str, int]:
    return {"i": i}


@agent("bench-steps", tools=[bench_read])
def bench_steps(ctx: Any, inputs: dict[str, Any]) -> int:
    for i in range(int(inputs["steps"])):
        ctx.call(bench_read, step=f"s{i}", i=i)
    return int(inputs["steps"])


@tool(kind="read", name="bench-read")
def _read(i: int) -> dict[str, int]:
    return {"i": i}


@tool(kind="effect", name="bench-effect")
def _effect(i: int, *, idempotency_key: str) -> dict[str, Any]:
    return {"i": i, "key": idempotency_key}


@llm.script("bench")
def _model(prompt: str, system: str) -> dict[str, str]:
    return {"text": prompt[::-1]}


durations: dict[str, list[float]] = {}
_lock = threading.Lock()


def bench_agent(kind: str, steps: int, name: str | None = None) -> str:
    """Register an agent that makes ``steps`` calls of ``kind`` and times each one.

    ``batched``: read steps under batched durability (default batch bounds), so that one
    commit in RUNLEDGER_BATCH_MAX_STEPS falls inside the timed calls.
    """
    name = name or f"bench-{kind}"
    durability: Durability = "batched" if kind == "batched" else "step"

    @agent(name, tools=[_read, _effect], durability=durability)
    def body(ctx: Any, inputs: Any) -> int:
        samples = []
        for i in range(steps):
            started = time.perf_counter()
            if kind in ("read", "batched"):
                ctx.call(_read, step=f"s{i}", i=i)
            elif kind == "effect":
                ctx.call(_effect, step=f"s{i}", i=i)
            elif kind == "model":
                ctx.model(f"prompt {i}", model="scripted:bench", step=f"s{i}")
            else:
                ctx.now(step=f"s{i}")
            samples.append(time.perf_counter() - started)
        with _lock:
            durations[name] = samples
        return steps

    return name


@tool(kind="read", name="bench-slow-hold")
def slow_hold(seconds: float) -> dict[str, float]:
    """A slow agent's step (a model call, a crawl): ``seconds`` of wall time."""
    time.sleep(seconds)
    return {"held": seconds}


@agent("bench-slow", tools=[slow_hold, bench_read])
def bench_slow(ctx: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Two steps: a slow one (``inputs["hold"]`` seconds), then a quick one. The recovery
    scenarios (harness/recovery.py) fill a deep queue with it."""
    held = ctx.call(slow_hold, step="hold", seconds=float(inputs["hold"]))
    ctx.call(bench_read, step="after", i=1)
    return held
