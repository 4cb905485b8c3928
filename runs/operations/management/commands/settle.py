"""Settle started effects from the command line, as the dashboard's settle page does.

    manage.py settle list
    manage.py settle propose run_… charge --outcome happened --result '{"gateway_ref": "…"}' \\
        --reason "the gateway's report shows it"
    manage.py settle approve 12 [--reason "checked"]
    manage.py settle reject 12 --reason "wrong charge id"

Each act is audited as ``cli:<login>``; the four-eyes rule holds (a proposal is approved by a
different person). An approval (or a proposal with approval off) queues the run for a worker.
Exit codes: see ``_common``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from ledger import selectors, transitions
from ledger.errors import NotAllowed
from ledger.models import Run, Settlement, SettlementOutcome, Step
from runs.operations.commands import (
    OperatorCommand,
    act,
    add_reason,
    bounded_int,
    parse_json,
    text_arg,
)


class Command(OperatorCommand):
    help = "List, propose, approve or reject settlements of started effects."

    def add_arguments(self, parser: CommandParser) -> None:
        acts = parser.add_subparsers(
            dest="act", required=True, metavar="list|propose|approve|reject"
        )
        acts.add_parser("list", help="effects waiting for a person, and proposals waiting")
        propose = acts.add_parser("propose", help="say how a started effect ended")
        propose.add_argument("run_id", type=text_arg)
        propose.add_argument("step_id")
        propose.add_argument("--outcome", required=True, choices=SettlementOutcome.values)
        propose.add_argument("--result", help="the downstream system's result as JSON (happened)")
        add_reason(propose, None)
        approve = acts.add_parser("approve", help="approve a proposal (not your own) and apply it")
        approve.add_argument("settlement", type=bounded_int(1, 2**62))
        add_reason(approve, "")
        reject = acts.add_parser("reject", help="refuse a proposal, or withdraw your own")
        reject.add_argument("settlement", type=bounded_int(1, 2**62))
        add_reason(reject, None)

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['act']}")(options)

    def _list(self, options: dict[str, Any]) -> None:
        write = self.stdout.write
        write("effects waiting for a person:")
        for step in selectors.settlement_queue_steps()[:200]:
            title = f"  {step.run.title}" if step.run.title else ""
            write(f"  {step.run_id} {step.step_id} key {step.effect_key}{title}")
        write("proposals waiting for approval:")
        for s in selectors.settlements_waiting()[:200]:
            write(
                f"  #{s.pk} {s.run_id} {s.step_id} {s.outcome} by {s.proposed_by_name}: "
                f"{s.reason[:80]}"
            )

    def _propose(self, options: dict[str, Any]) -> None:
        run_id = options["run_id"]
        result = None
        if options["result"] is not None:
            result = parse_json(options["result"], what="--result")
        step = act(run_id, lambda: _step(run_id, options["step_id"]))
        settlement = act(
            run_id,
            lambda: transitions.settlement_propose(
                step=step,
                outcome=options["outcome"],
                reason=options["reason"],
                by=transitions.cli_actor(),
                seen_version=step.version,
                result=result,
            ),
        )
        self._report(settlement)

    def _approve(self, options: dict[str, Any]) -> None:
        settlement = act("", lambda: Settlement.objects.get(pk=options["settlement"]))
        done = act(
            settlement.run_id,
            lambda: transitions.settlement_approve(
                settlement=settlement,
                by=transitions.cli_actor(),
                reason=options["reason"],
            ),
        )
        self._report(done)

    def _reject(self, options: dict[str, Any]) -> None:
        settlement = act("", lambda: Settlement.objects.get(pk=options["settlement"]))
        done = act(
            settlement.run_id,
            lambda: transitions.settlement_reject(
                settlement=settlement, by=transitions.cli_actor(), reason=options["reason"]
            ),
        )
        self._report(done)

    def _report(self, settlement: Settlement) -> None:
        self.stdout.write(
            f"settlement #{settlement.pk} of {settlement.run_id} {settlement.step_id}: "
            f"{settlement.outcome}, {settlement.status}"
            + ("" if settlement.result is None else f" (result {json.dumps(settlement.result)})")
        )


def _step(run_id: str, step_id: str) -> Step:
    step = Step.objects.filter(run_id=run_id, step_id=step_id).first()
    if step is None:
        Run.objects.get(pk=run_id)  # no run: "no run …"
        raise NotAllowed(f"run {run_id} has no step {step_id!r}")
    return step
