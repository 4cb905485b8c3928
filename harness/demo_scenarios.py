"""The demo's scenarios, produced for real: each run is executed by a separate process that
SIGKILLs itself at a named crash point (harness/faults.py), and resumed by another
process, sometimes after a "deploy" (a changed prompt or plan). What the dashboard then shows
was written by the engine, not inserted by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.utils import timezone

from ledger.models import Run

MANAGE = Path(__file__).resolve().parents[1] / "manage.py"
#: The example agents with the framework agents (``ledger.examples.pydantic_agents`` needs the
#: ``pydantic-ai`` extra, which the development install has).
FRAMEWORK_MODULES = "ledger.examples.agents,ledger.examples.pydantic_agents"


@dataclass(frozen=True)
class Scenario:
    key: str
    agent: str
    inputs: dict[str, Any]
    kills: tuple[str, ...] = ()  # one crashed execution per entry
    crash_env: dict[str, str] = field(default_factory=dict)
    resume_env: dict[str, str] | None = field(default_factory=dict)  # None: leave it for a worker
    expect: tuple[str, str] = ("succeeded", "")
    max_resumes: int | None = None
    in_process: bool = False  # no crash to stage: executed by the demo's own process (faster)


SCENARIOS = (
    Scenario(
        "charge-lookup-down",
        "refund",
        {
            "invoice_id": "inv_1001",
            "story": "The worker was killed right after the payment provider refunded the card. "
            "When it was resumed the provider's lookup API was down, so nobody could say "
            "whether the refund happened. The lookup works again: resume, and it settles itself.",
        },
        kills=("charge.after_effect",),
        resume_env={"RUNLEDGER_PROVIDER_LOOKUP": "down"},
        expect=("needs_attention", "reconciliation"),
    ),
    Scenario(
        "notify-no-read-path",
        "refund",
        {
            "invoice_id": "inv_1003",
            "story": "The worker was killed just after posting to the team channel. The notifier "
            "has no read path: only a person can say whether the message went out.",
        },
        kills=("notify.after_effect",),
        expect=("needs_attention", "reconciliation"),
    ),
    Scenario(
        "gateway-charge-unknown",
        "renewal",
        {
            "customer": "cus_hopper",
            "story": "The worker was killed while the legacy gateway charged a renewal. The "
            "gateway has no lookup: check its records, settle the charge, get it approved.",
        },
        kills=("gateway.after_effect",),
        expect=("needs_attention", "reconciliation"),
    ),
    Scenario(
        "gateway-charge-never-sent",
        "renewal",
        {
            "customer": "cus_knuth",
            "story": "The worker was killed after writing its intent to charge, before the "
            "gateway was called. Nothing was charged: settle it as 'did not happen'.",
        },
        kills=("gateway.before_effect",),
        expect=("needs_attention", "reconciliation"),
    ),
    Scenario(
        "stale-after-prompt-change",
        "refund",
        {
            "invoice_id": "inv_1004",
            "story": "The worker was killed before the refund; a deploy then changed the refund "
            "prompt. The model's recorded decision answers the old prompt: it is stale.",
        },
        kills=("charge.before_effect",),
        crash_env={"RUNLEDGER_EXAMPLE_PROMPT": "1"},
        expect=("needs_attention", "stale"),
    ),
    Scenario(
        "plan-divergence",
        "renewal",
        {
            "customer": "cus_lovelace",
            "story": "Killed while it fetched the subscription under plan 1 (before any step "
            "was recorded); the code now runs plan 2, which adds a fraud check. The agent refuses "
            "to resume into a different plan: start a clean run.",
        },
        kills=("fetch_subscription",),
        crash_env={"RUNLEDGER_EXAMPLE_PLAN": "1"},
        expect=("needs_attention", "divergence"),
    ),
    Scenario(
        "budget-used",
        "refund",
        {
            "invoice_id": "inv_1005",
            "model": "scripted:refund-decision",  # the crash point is in the scripted model
            "story": "This run crashed in the model's refund decision on every attempt (the "
            "invoice and the clock were recorded, then replayed) and used its resume budget of "
            "1. It waits until someone raises the budget.",
        },
        kills=("decide", "decide"),
        max_resumes=1,
        expect=("needs_attention", "budget"),
    ),
    Scenario(
        "recovered-before-charge",
        "refund",
        {
            "invoice_id": "inv_1006",
            "story": "Killed after the intent to refund was written, before the provider was "
            "called. The resume asked the provider (nothing under that key) and refunded once, "
            "with the same key.",
        },
        kills=("charge.before_effect",),
    ),
    Scenario(
        "pydantic-ai-refund-recovered",
        "refund_pydantic_ai",
        {
            "invoice_ids": ["inv_1001", "inv_1003"],
            "story": "A PydanticAI agent refunding two invoices: its worker was killed right "
            "after the payment provider took the first refund, before the result was recorded. "
            "The resume asked the provider through the lookup (the refund had happened) instead "
            "of letting the model refund again, and the agent went on: each refund once.",
        },
        kills=("charge.after_effect",),
        crash_env={"RUNLEDGER_AGENT_MODULES": FRAMEWORK_MODULES},
        resume_env={"RUNLEDGER_AGENT_MODULES": FRAMEWORK_MODULES},
    ),
    Scenario(
        "payout-waiting-at-its-gate",
        "payout",
        {
            "invoice_id": "inv_1004",
            "story": "A payout of an invoice's total: its pay_out tool needs a person's approval "
            "before anything is sent. The run waits at the gate, holding no worker; approve "
            "(or reject) it on the Approvals page and a worker sends the payout once.",
        },
        expect=("needs_attention", "approval"),
    ),
    Scenario(
        "recovered-after-email",
        "refund",
        {
            "invoice_id": "inv_1002",
            "story": "Killed while it fetched the invoice; resumed by another process, which "
            "finished the run. The model denied the refund (over the auto-approve limit) and "
            "told the team.",
        },
        kills=("fetch_invoice",),
    ),
    Scenario(
        "waiting-for-an-event",
        "refund_after_return",
        {
            "invoice_id": "inv_1004",
            "story": "Waits for the warehouse's return_received event, holding no worker; send "
            "it from the run page's mailbox section with curl or the client, and the run refunds.",
        },
        expect=("queued", ""),
        in_process=True,
    ),
    Scenario(
        "asking-a-person",
        "refund_question",
        {
            "invoice_id": "inv_1002",
            "story": "Asks an operator whether to refund an invoice over the automatic limit: "
            "the run page shows the question as a form; the answer resumes the run.",
        },
        expect=("needs_attention", "question"),
        in_process=True,
    ),
)


#: Every staged execution: a short effect margin, so that a resume waits out the killed
#: process's effect window quickly (ledger.engine.fence); the killed process keeps a 1 s lease.
_FENCE = {"RUNLEDGER_EFFECT_MARGIN_SECONDS": "0.1"}


def _execute(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(MANAGE), "example_execute", *args],
        env={**os.environ, **_FENCE, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def produce(scenario: Scenario) -> Run:
    """Start the run, kill it where the scenario says, resume it, check where it stopped.

    The first execution also starts the run, in the crashing process, so that the run records
    the plan and prompt that process had (a deploy may change them before the resume).
    """
    run_id = ""
    if scenario.in_process:
        from harness.unannounced import start_unannounced
        from ledger.processes.execute import run_execute

        run_id = start_unannounced(agent=scenario.agent, inputs=scenario.inputs).run_id
        run_execute(run_id=run_id, worker="demo", heartbeat=False)
    for point in scenario.kills:
        args = [run_id] if run_id else _new_args(scenario)
        # A short lease, so the dead process's claim lapses soon, as the sweep would see it
        # (long enough that a busy machine's heartbeat keeps it while the process lives).
        env = {**scenario.crash_env, "RUNLEDGER_KILL_AT": point, "RUNLEDGER_LEASE_SECONDS": "1"}
        done = _execute(args, env)
        if done.returncode != -signal.SIGKILL:
            raise RuntimeError(
                f"{scenario.key}: the process at {point} exited {done.returncode}: "
                f"{done.stderr[-2000:]}"
            )
        run_id = run_id or done.stdout.split("run_id=", 1)[1].split()[0]
        _wait_for_lapse(run_id)
    if scenario.in_process:
        pass
    elif not run_id:
        done = _execute(_new_args(scenario), scenario.resume_env or {})
        run_id = done.stdout.split("run_id=", 1)[1].split()[0]
    elif scenario.resume_env is not None:
        _execute([run_id], scenario.resume_env)
    run = Run.objects.get(pk=run_id)
    if (run.status, run.reason) != scenario.expect:
        raise RuntimeError(
            f"{scenario.key}: expected {scenario.expect}, got {(run.status, run.reason)}: "
            f"{run.detail or run.error}"
        )
    return run


def _wait_for_lapse(run_id: str) -> None:
    """Until the killed process's lease has expired, so the next execution may claim the run."""
    deadline = time.monotonic() + 60
    while Run.objects.filter(pk=run_id, lease_expires_at__gte=timezone.now()).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id}: the killed process's lease never lapsed")
        time.sleep(0.05)


def _new_args(scenario: Scenario) -> list[str]:
    args = ["--new", scenario.agent, "--inputs", json.dumps(scenario.inputs)]
    if scenario.max_resumes is not None:
        args += ["--max-resumes", str(scenario.max_resumes)]
    return args
