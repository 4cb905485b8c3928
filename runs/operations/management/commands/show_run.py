"""Show a run, its steps in order and its executions: `manage.py show_run run_…`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import selectors
from ledger.models import Run
from runs.operations.commands import OperatorCommand, text_arg


def _preview(value: Any, width: int = 60) -> str:
    text = json.dumps(value, sort_keys=True) if value is not None else "-"
    return text if len(text) <= width else text[: width - 1] + "…"


class Command(OperatorCommand):
    help = "Show a run's status, lease, every step of its ledger in order, and its executions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)

    def handle(self, *args: Any, **options: Any) -> None:
        run = Run.objects.filter(pk=options["run_id"]).first()
        if run is None:
            raise CommandError(f"no run {options['run_id']}")
        write = self.stdout.write
        write(f"run {run.run_id}  agent {run.agent}  team {run.team}  plan {run.plan_version}")
        if run.title:
            write(f"title {run.title}")
        if run.parent_id:
            write(f"{run.parent_kind or 'child'} of {run.parent_id}")
        write(
            f"status {run.status}"
            + (f" ({run.reason}, step {run.blocked_step_id!r})" if run.reason else "")
        )
        if run.pause_id:
            write(f"held by pause {run.pause_id} (lifting it queues the run; no budget used)")
        if run.detail:
            write(f"detail {run.detail}")
        if run.wake_at is not None and run.status == "queued":
            until = f"until {run.wake_at:%Y-%m-%d %H:%M:%S.%f} UTC"
            if run.wait_event:  # ctx.wait_for_event: released until its event (or timeout)
                never = run.wake_at.year == 9999
                write(f"waiting for event {run.wait_event!r}" + ("" if never else f" {until}"))
            elif run.detail.startswith("sleeping"):  # ctx.sleep
                write(f"sleeping {until}")
            else:
                write(f"waiting to retry {until}")
        write(f"resumes {run.resume_count}/{run.max_resumes}  executions {run.executions}")
        if run.lease_token:
            write(
                f"lease {run.lease_owner} until {run.lease_expires_at:%H:%M:%S.%f} "
                f"(heartbeat {run.heartbeat_at:%H:%M:%S.%f})"
            )
        write(f"inputs {_preview(run.inputs, 200)}")
        if run.result is not None:
            write(f"result {_preview(run.result, 200)}")
        if run.error:
            write(f"error {run.error.splitlines()[0][:200]}")
        write(f"{'seq':>4} {'step':<24} {'kind':<7} {'status':<10} att  effect key / result")
        failures = selectors.run_failures(run_id=run.run_id)
        for step in run.steps.order_by("seq"):
            extra = step.effect_key if step.status == "started" else _preview(step.result)
            write(
                f"{step.seq:>4} {step.step_id:<24} {step.kind:<7} {step.status:<10} "
                f"{step.attempt:>3}  {extra or '-'}"
            )
            if step.step_id in failures:
                for failure in failures[step.step_id]:
                    self._failure(failure)
            elif step.error:
                write(f"{'':>5} error: {step.error.splitlines()[0][:100]}")
        _executions(write, run.run_id)

    def _failure(self, f: selectors.AttemptFailure) -> None:
        """One failed attempt: when, what, what came next, and its traceback, indented."""
        write = self.stdout.write
        when = f" at {f.at:%H:%M:%S.%f}" if f.at else ""
        what = f"{f.type}: {f.message}" if f.type else f.message
        line = what.splitlines()[0][:200] if what else "-"
        if f.retry_at is not None:
            asked = f", as the tool asked ({f.retry_after:g}s)" if f.retry_after is not None else ""
            then = f"retry at {f.retry_at:%H:%M:%S.%f} (after {f.wait_seconds:.3f}s{asked})"
        else:
            then = f"gave up: {f.why}" if f.why else ""
        write(f"{'':>5} attempt {f.attempt or '?'}{when} failed: {line}")
        if then:
            write(f"{'':>7} {then}")
        for tb_line in f.traceback.rstrip().splitlines():
            write(f"{'':>7} | {tb_line}")


def _executions(write: Any, run_id: str) -> None:
    """Each execution, claim to end: who, when, how it ended, steps replayed and executed."""
    rows = selectors.run_executions(run_id)
    if not rows:
        return
    write(
        f"{'exec':>4} {'worker':<32} {'started':<15} {'took':>7} {'ending':<16} replayed/executed"
    )
    for row in rows:
        took = f"{row.seconds:.1f}s" if row.seconds is not None else "-"
        started = f"{row.started_at:%H:%M:%S.%f}"[:12]
        number = f"#{row.number}"
        write(
            f"{number:<4} {row.worker[:32]:<32} {started:<15} {took:>7} {row.ending:<16} "
            f"{row.replayed}/{row.executed}"
        )
        if row.error:
            write(f"{'':>5} {row.error.splitlines()[0][:120]}")
