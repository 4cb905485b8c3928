"""A probe agent for the worker race tests, loaded by the test process and by the workers.

Every execution of its body appends ``enter``/``exit`` lines (run id, pid, time) to the file
named in its inputs, so a test can count executors per run. Its ``hold`` step makes the first
process that reaches it (per gate directory) wait, for a time or until released, so a test
can freeze that worker mid-run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ledger.agents import RunContext, agent, tool
from ledger.examples.agents import notify_team, post_entry, refund_charge, send_email


def _append(path: str, line: str) -> None:
    # O_APPEND writes of one short line are atomic between processes.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@tool(kind="read", name="probe_hold")
def probe_hold(gate_dir: str, seconds: float | None) -> dict[str, Any]:
    """The first process to get here (per gate directory) holds for ``seconds``, or, when
    ``seconds`` is None, until a ``release`` file appears in the gate directory (a test freezes
    it there without racing the hold's end)."""
    try:
        fd = os.open(Path(gate_dir) / "first", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return {"pid": os.getpid(), "held": False}
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    if seconds is not None:
        time.sleep(seconds)
    else:
        release = Path(gate_dir) / "release"
        deadline = time.monotonic() + 600
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return {"pid": os.getpid(), "held": True}


@agent("probe", plan_version="1", max_resumes=5, tools=[probe_hold, send_email])
def probe(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Hold, then send one email; log every execution of this body."""
    _append(inputs["log"], f"enter {ctx.run_id} {os.getpid()} {time.time()!r}")
    try:
        held = ctx.call(probe_hold, step="hold", gate_dir=inputs["gate"], seconds=inputs["hold"])
        sent = ctx.call(
            send_email, step="report", to="probe@example.com", subject="probe", body="held"
        )
        return {"hold_pid": held["pid"], "message_id": sent["message_id"]}
    finally:
        _append(inputs["log"], f"exit {ctx.run_id} {os.getpid()} {time.time()!r}")


@agent(
    "one_effect", plan_version="1", max_resumes=5, tools=[refund_charge, post_entry, notify_team]
)
def one_effect(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """One effect on the provider named in the inputs: ``payment`` (idempotency key, lookup,
    fencing token), ``ledger`` (append-only, lookup only) or ``notify`` (no read path)."""
    provider = inputs["provider"]
    if provider == "payment":
        done = ctx.call(refund_charge, step="effect", customer="cus_fence", amount_cents=100)
    elif provider == "ledger":
        done = ctx.call(post_entry, step="effect", account="acct_fence", amount_cents=100)
    else:
        done = ctx.call(notify_team, step="effect", channel="#fence", text="fenced")
    return {"effect": done}


def executions(log: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    """Per run: (pid, entered, exited or None) for every execution of the probe's body."""
    runs: dict[str, list[tuple[int, float, float | None]]] = {}
    if not log.exists():
        return runs
    open_: dict[tuple[str, int], float] = {}
    for line in log.read_text().splitlines():
        event, run_id, pid, at = line.split()
        if event == "enter":
            open_[(run_id, int(pid))] = float(at)
        else:
            entered = open_.pop((run_id, int(pid)))
            runs.setdefault(run_id, []).append((int(pid), entered, float(at)))
    for (run_id, pid), entered in open_.items():
        runs.setdefault(run_id, []).append((pid, entered, None))
    return runs
