"""An effect's approval gate as the live steps see it: before the intent row is written, the
step's gate must be approved for exactly today's arguments, unexpired and unused.

``decision`` reads the step's newest gate (one query, for gated calls only) and returns the gate
to use in the intent's transaction, or raises: ``ApprovalRequired`` (the run stops at the gate:
none yet, still waiting, voided by other arguments, expired) or ``ApprovalRejected`` (a person
rejected exactly these arguments and the tool says ``on_reject="raise"``). A gate rejected with
``on_reject="fail"`` failed its run; a person who retries that run is asked again.
"""

from __future__ import annotations

from datetime import datetime

from ledger import selectors
from ledger.conf import conf
from ledger.engine.calls import Call
from ledger.errors import ApprovalRejected, ApprovalRequired
from ledger.models import Gate, GateStatus


def decision(call: Call, *, run_id: str, now: datetime) -> int:
    """The pk of the approved gate the effect's intent uses; raises when there is none."""
    gate = selectors.gate_latest(run_id=run_id, step_id=call.step_id)
    if gate is not None and gate.digest == call.input_hash:
        if gate.status == GateStatus.APPROVED and gate.expires_at > now:
            return gate.pk
        if gate.status == GateStatus.REJECTED and gate.on_reject == "raise":
            raise ApprovalRejected(call.step_id, gate.decided_by_name, gate.decision_reason)
    raise required(call, why=_why(gate, call, now))


def required(call: Call, *, why: str) -> ApprovalRequired:
    policy = call.approval
    assert policy is not None
    expires = policy.expires_after or conf.RUNLEDGER_APPROVAL_EXPIRES_SECONDS
    people = "two different people" if policy.approvers == 2 else "a person"
    return ApprovalRequired(
        call.step_id,
        f"effect {call.tool!r} waits for {people} to approve its exact arguments "
        f"(digest {call.input_hash[:12]}…){why}",
        tool=call.tool,
        arguments_text=call.inputs_text,
        digest=call.input_hash,
        approvers=policy.approvers,
        on_reject=policy.on_reject,
        expires_after=expires,
    )


def _why(gate: Gate | None, call: Call, now: datetime) -> str:
    if gate is None:
        return ""
    if gate.digest != call.input_hash:
        return "; the arguments differ from the ones last asked about, so that gate is void"
    if gate.expires_at <= now and gate.status in (GateStatus.WAITING, GateStatus.APPROVED):
        return "; the last gate expired unused"
    if gate.status == GateStatus.USED:
        return "; the last approval was used already"
    return ""
