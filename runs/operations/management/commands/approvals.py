"""Approval gates from the command line, as the dashboard's Approvals queue does.

    manage.py approvals list
    manage.py approvals show 7          (the exact canonical arguments and their digest)
    manage.py approvals approve 7 [--reason "checked the invoice"]
    manage.py approvals reject 7 --reason "not ours to pay"

Each act is audited as ``cli:<login>``; a gate that needs two approvers needs two different
people. The last approval queues the run for a worker; a rejection queues it (the agent gets
``ApprovalRejected``) or fails it, as the tool declares. Exit codes: see ``_common``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandParser

from ledger import selectors, transitions
from ledger.errors import NotAllowed
from ledger.models import Gate
from runs.operations.commands import OperatorCommand, act, add_reason, bounded_int


class Command(OperatorCommand):
    help = "List, show, approve or reject approval gates (effects waiting to be approved)."

    def add_arguments(self, parser: CommandParser) -> None:
        acts = parser.add_subparsers(dest="act", required=True, metavar="list|show|approve|reject")
        acts.add_parser("list", help="gates waiting for a decision, oldest first")
        for name, text in (
            ("show", "one gate: its exact canonical arguments and their digest"),
            ("approve", "approve a gate (the last approver queues the run)"),
            ("reject", "reject a gate (the agent gets ApprovalRejected, or the run fails)"),
        ):
            sub = acts.add_parser(name, help=text)
            sub.add_argument("gate", type=bounded_int(1, 2**62))
            if name != "show":
                add_reason(sub, "" if name == "approve" else None)

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['act']}")(options)

    def _list(self, options: dict[str, Any]) -> None:
        self.stdout.write("gates waiting for approval:")
        for gate in selectors.gate_queue(limit=200):
            people = f"{len(gate.approved_by)}/{gate.approvers_required} approved"
            title = f"  {gate.run.title}" if gate.run.title else ""
            self.stdout.write(
                f"  #{gate.pk} {gate.run_id} {gate.step_id} {gate.tool} "
                f"digest {gate.digest[:12]} {people}, expires {gate.expires_at:%Y-%m-%d %H:%M}"
                f"{title}"
            )

    def _show(self, options: dict[str, Any]) -> None:
        gate = act("", lambda: _gate(options["gate"]))
        write = self.stdout.write
        write(f"gate #{gate.pk}: {gate.run_id} {gate.step_id} ({gate.tool}), {gate.status}")
        write(f"  approvers: {', '.join(gate.approved_by) or '-'} of {gate.approvers_required}")
        write(f"  on reject: {gate.on_reject}; expires {gate.expires_at.isoformat()}")
        write(f"  digest:    {gate.digest}")
        write(f"  arguments: {gate.arguments_text}")

    def _approve(self, options: dict[str, Any]) -> None:
        self._decide(options, transitions.gate_approve)

    def _reject(self, options: dict[str, Any]) -> None:
        self._decide(options, transitions.gate_reject)

    def _decide(self, options: dict[str, Any], decide: Callable[..., Gate]) -> None:
        gate = act("", lambda: _gate(options["gate"]))
        by = transitions.cli_actor()
        done = act(gate.run_id, lambda: decide(gate=gate, by=by, reason=options["reason"]))
        self._report(done)

    def _report(self, gate: Gate) -> None:
        people = f"{len(gate.approved_by)}/{gate.approvers_required} approved"
        self.stdout.write(
            f"gate #{gate.pk} of {gate.run_id} {gate.step_id}: {gate.status} ({people})"
        )


def _gate(pk: int) -> Gate:
    gate = selectors.gate_get(pk)
    if gate is None:
        raise NotAllowed(f"no gate #{pk}")
    return gate
