"""Test agents for approval gates: the amount a gated payout sends is read from a file on every
resume (a read that expires at once), so a test can change the arguments between an approval
and the resume — in this process or in a real worker's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.agents import RunContext, agent, tool
from ledger.examples.agents import pay_out


@tool(kind="read", ttl_seconds=0.001)
def read_amount(path: str) -> int:
    """The amount to pay, as the file holds it now."""
    return int(Path(path).read_text().strip())


@agent("gated_amount", plan_version="1", max_resumes=20, tools=[read_amount, pay_out])
def gated_amount(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Pay the amount in the file to the customer, after a person approves it."""
    amount = ctx.call(read_amount, step="amount", path=inputs["path"])
    charge = ctx.call(pay_out, step="pay_out", customer=inputs["customer"], amount_cents=amount)
    return {"charge_id": charge["charge_id"], "amount_cents": amount}
