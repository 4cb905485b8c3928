"""Example agents: what an agent author writes. Used by the demo, the tests and the kill test."""

from __future__ import annotations

from typing import Any

from ledger import llm
from ledger.agents import RunContext, agent, tool
from ledger.examples import faults, simulators

INVOICES = {
    "inv_1001": {"customer": "cus_ada", "total_cents": 4200, "reason": "double billed"},
    "inv_1002": {"customer": "cus_grace", "total_cents": 125000, "reason": "service outage"},
    "inv_1003": {"customer": "cus_linus", "total_cents": 990, "reason": "cancelled in trial"},
}

# The prompt is code: editing it between a crash and a resume makes the model step stale.
REFUND_PROMPT = (
    "Invoice {invoice_id} for {customer}: {total_cents} cents, reason: {reason}. "
    "Refund it? Answer approve or deny with the amount in cents."
)
AUTO_APPROVE_LIMIT_CENTS = 50000


@tool(kind="read")
def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faults.point("fetch_invoice")
    if invoice_id not in INVOICES:
        raise LookupError(f"no invoice {invoice_id}")
    return {"invoice_id": invoice_id, **INVOICES[invoice_id]}


@tool(kind="effect", reconcile=simulators.provider_lookup)
def refund_charge(customer: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """Refund through the payment provider (idempotency keys, lookup by key)."""
    return simulators.provider_charge(
        customer=customer, amount_cents=-amount_cents, idempotency_key=idempotency_key
    )


@tool(kind="effect", reconcile=simulators.outbox_search)
def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    """Email the customer through the outbox (search by message id)."""
    return simulators.outbox_send(
        to=to, subject=subject, body=body, idempotency_key=idempotency_key
    )


@tool(kind="effect")
def notify_team(channel: str, text: str, *, idempotency_key: str) -> dict[str, Any]:
    """Post to the team's channel (no read path: a crash here needs a person)."""
    return simulators.notifier_send(channel=channel, text=text, idempotency_key=idempotency_key)


@llm.script("refund-decision")
def _decide(prompt: str, system: str) -> dict[str, Any]:
    faults.point("decide")  # inside a model step
    cents = int(prompt.split(": ", 1)[1].split(" cents")[0])
    verdict = "approve" if cents <= AUTO_APPROVE_LIMIT_CENTS else "deny"
    return {"text": f"{verdict} {cents}", "decision": verdict, "amount_cents": cents}


@agent(
    "refund",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge, send_email, notify_team],
)
def refund(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund an invoice: fetch it, ask the model, refund, email the customer, tell the team."""
    invoice = ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    decided_at = ctx.now(step="decided_at")
    decision = ctx.model(
        REFUND_PROMPT.format(**invoice),
        model=inputs.get("model", "scripted:refund-decision"),
        step="decide",
    )
    if decision.get("decision") != "approve":
        ctx.call(
            notify_team,
            step="notify",
            channel="#billing",
            text=f"refund of {invoice['invoice_id']} denied: needs a human",
        )
        return {"refunded": False, "invoice_id": invoice["invoice_id"]}
    charge = ctx.call(
        refund_charge,
        step="refund",
        customer=invoice["customer"],
        amount_cents=invoice["total_cents"],
    )
    email = ctx.call(
        send_email,
        step="email_customer",
        to=f"{invoice['customer']}@example.com",
        subject="Your refund",
        body=f"We refunded {invoice['total_cents']} cents ({charge['charge_id']}).",
    )
    ctx.call(
        notify_team,
        step="notify",
        channel="#billing",
        text=f"refunded {invoice['invoice_id']}: {charge['charge_id']}",
    )
    return {
        "refunded": True,
        "invoice_id": invoice["invoice_id"],
        "charge_id": charge["charge_id"],
        "message_id": email["message_id"],
        "decided_at": decided_at.isoformat(),
    }


@tool(kind="read")
def lookup_record(index: int) -> dict[str, Any]:
    """A cheap read: record ``index`` of a synthetic data set."""
    faults.point("lookup_record")
    return {"index": index, "value": (index * 7919) % 1000}


@llm.script("summarize")
def _summarize(prompt: str, system: str) -> dict[str, Any]:
    faults.point("summarize")  # inside a model step
    return {"text": f"summary of {len(prompt)} chars", "length": len(prompt)}


@agent(
    "survey",
    plan_version="1",
    divergence="replan",
    max_resumes=20,
    tools=[lookup_record, send_email],
)
def survey(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Read N records, summarise every 10th with the model, email one report (long runs)."""
    total = 0
    for i in range(int(inputs.get("records", 10))):
        record = ctx.call(lookup_record, step=f"record.{i}", index=i)
        total += record["value"]
        if i % 10 == 9:
            ctx.model(
                f"records up to {i}: total {total}", model="scripted:summarize", step=f"summary.{i}"
            )
    report = ctx.call(
        send_email,
        step="report",
        to=inputs.get("to", "ops@example.com"),
        subject="survey report",
        body=f"total {total}",
    )
    return {"total": total, "message_id": report["message_id"]}
