"""An agent whose first step waits, as a run waits on a slow model: its tool notes that it is
inside (a line in ``RUNLEDGER_TEST_WAIT_DIR/inside``) and returns once the file ``go`` exists
there. Loaded by real workers (``RUNLEDGER_AGENT_MODULES``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ledger.agents import agent, tool


def _dir() -> Path:
    return Path(os.environ["RUNLEDGER_TEST_WAIT_DIR"])


@tool(kind="read", name="wait-think")
def think(n: int) -> int:
    with open(_dir() / "inside", "a") as out:
        out.write(f"{n}\n")
    while not (_dir() / "go").exists():
        time.sleep(0.05)  # the waiting itself: the test opens the gate
    return n * 2


@tool(kind="read", name="wait-after")
def after(n: int) -> int:
    return n + 1


@agent("wait-for-gate", tools=[think, after])
def wait_for_gate(ctx, inputs):
    doubled = ctx.call(think, step="think", n=inputs["n"])
    return ctx.call(after, step="after", n=doubled)
