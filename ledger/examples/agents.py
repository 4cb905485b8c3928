"""Example agents: what an agent author writes. Used by the demo, the tests and the kill test."""

from __future__ import annotations

import os
import time
from typing import Any

from ledger import faultpoints, llm
from ledger.agents import (
    Approval,
    ApprovalRejected,
    AsyncRunContext,
    RunContext,
    agent,
    off_loop,
    tool,
)
from ledger.examples import simulators
from ledger.loops import Limits, chat, messages

INVOICES = {
    "inv_1001": {"customer": "cus_ada", "total_cents": 4200, "reason": "double billed"},
    "inv_1002": {"customer": "cus_grace", "total_cents": 125000, "reason": "service outage"},
    "inv_1003": {"customer": "cus_linus", "total_cents": 990, "reason": "cancelled in trial"},
    "inv_1004": {"customer": "cus_barbara", "total_cents": 15000, "reason": "wrong plan"},
    "inv_1005": {"customer": "cus_edsger", "total_cents": 3100, "reason": "duplicate seat"},
    "inv_1006": {"customer": "cus_margaret", "total_cents": 7700, "reason": "late delivery"},
}
SUBSCRIPTIONS = {
    "cus_hopper": {"plan": "team", "amount_cents": 24900},
    "cus_knuth": {"plan": "solo", "amount_cents": 900},
    "cus_lovelace": {"plan": "team", "amount_cents": 24900},
}

# The prompt is code: editing it between a crash and a resume makes the model step stale. The
# demo switches versions with RUNLEDGER_EXAMPLE_PROMPT to stage exactly that (a deploy between
# the crash and the resume).
REFUND_PROMPTS = {
    "1": (
        "Invoice {invoice_id} for {customer}: {total_cents} cents, reason: {reason}. "
        "Refund it? Answer approve or deny with the amount in cents."
    ),
    "2": (
        "Invoice {invoice_id} for {customer}: {total_cents} cents, reason: {reason}. "
        "Refund it if the reason is ours? Answer approve or deny with the amount in cents."
    ),
}
REFUND_PROMPT = REFUND_PROMPTS[os.environ.get("RUNLEDGER_EXAMPLE_PROMPT", "2")]
# The renewal agent's plan; version 2 added a fraud check before the charge.
RENEWAL_PLAN = os.environ.get("RUNLEDGER_EXAMPLE_PLAN", "2")
AUTO_APPROVE_LIMIT_CENTS = 50000


@tool(kind="read")
def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faultpoints.point("fetch_invoice")
    if invoice_id not in INVOICES:
        raise LookupError(f"no invoice {invoice_id}")
    return {"invoice_id": invoice_id, **INVOICES[invoice_id]}


@tool(kind="effect", reconcile=simulators.provider_lookup, list_keys=simulators.provider_keys)
def refund_charge(
    customer: str, amount_cents: int, *, idempotency_key: str, fencing_token: int | None = None
) -> dict[str, Any]:
    """Refund through the payment provider (idempotency keys, lookup by key, fencing tokens)."""
    return simulators.provider_charge(
        customer=customer,
        amount_cents=-amount_cents,
        idempotency_key=idempotency_key,
        fencing_token=fencing_token,
    )


@tool(kind="effect", reconcile=simulators.ledger_lookup)
def post_entry(account: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """Append to the accounting ledger (no idempotency; searchable by the key as memo)."""
    return simulators.ledger_append(
        account=account, amount_cents=amount_cents, memo=idempotency_key
    )


@tool(kind="effect", reconcile=simulators.outbox_search, list_keys=simulators.outbox_keys)
def send_email(to: str, subject: str, body: str, *, idempotency_key: str) -> dict[str, Any]:
    """Email the customer through the outbox (search by message id)."""
    return simulators.outbox_send(
        to=to, subject=subject, body=body, idempotency_key=idempotency_key
    )


@tool(kind="effect")
def notify_team(channel: str, text: str, *, idempotency_key: str) -> dict[str, Any]:
    """Post to the team's channel (no read path: a crash here needs a person)."""
    return simulators.notifier_send(channel=channel, text=text, idempotency_key=idempotency_key)


def default_model() -> str:
    """A real model when a key is configured (Anthropic's API), else the scripted one.

    ``RUNLEDGER_EXAMPLE_MODEL`` picks another model id; a run's own ``inputs["model"]`` wins.
    """
    if os.environ.get("RUNLEDGER_EXAMPLE_MODEL"):
        return os.environ["RUNLEDGER_EXAMPLE_MODEL"]
    return "claude-haiku-4-5" if os.environ.get("ANTHROPIC_API_KEY") else "scripted:refund-decision"


def refund_decision(output: dict[str, Any]) -> str:
    """approve or deny, from the scripted answer's field or a real model's words."""
    if output.get("decision") in ("approve", "deny"):
        return str(output["decision"])
    words = str(output.get("text", "")).lower()
    return "approve" if "approve" in words and "deny" not in words else "deny"


@llm.script("refund-decision")
def _decide(prompt: str, system: str) -> dict[str, Any]:
    faultpoints.point("decide")  # inside a model step
    cents = int(prompt.split(": ", 1)[1].split(" cents")[0])
    verdict = "approve" if cents <= AUTO_APPROVE_LIMIT_CENTS else "deny"
    return {"text": f"{verdict} {cents}", "decision": verdict, "amount_cents": cents}


@agent(
    "refund",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge, send_email, notify_team],
    title="Refund invoice {invoice_id}",
    labels=("invoice_id",),
    requires=("invoice_id",),
)
def refund(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund an invoice: fetch it, ask the model, refund, email the customer, tell the team."""
    invoice = ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    decided_at = ctx.now(step="decided_at")
    decision = ctx.model(
        REFUND_PROMPT.format(**invoice),
        model=inputs.get("model") or default_model(),
        step="decide",
    )
    if refund_decision(decision) != "approve":
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


async def _provider_lookup_async(idempotency_key: str) -> Any:
    """The provider's lookup by key, awaited (an async reconcile)."""
    return await off_loop(simulators.provider_lookup, idempotency_key)


@tool(kind="effect", reconcile=_provider_lookup_async)
async def refund_charge_async(
    customer: str, amount_cents: int, *, idempotency_key: str, fencing_token: int | None = None
) -> dict[str, Any]:
    """Refund through the payment provider, from async code (its client is sync: on a thread)."""
    return await off_loop(  # type: ignore[no-any-return]
        simulators.provider_charge,
        customer=customer,
        amount_cents=-amount_cents,
        idempotency_key=idempotency_key,
        fencing_token=fencing_token,
    )


@agent(
    "refund_async",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge_async, send_email, notify_team],
    title="Refund invoice {invoice_id} (async)",
    labels=("invoice_id",),
    requires=("invoice_id",),
)
async def refund_async(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """``refund`` as an async agent: the same steps, awaited (a sync read and sync effects on
    threads, an async effect and lookup, the model client's ``acomplete``)."""
    invoice = await ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    decided_at = await ctx.now(step="decided_at")
    decision = await ctx.model(
        REFUND_PROMPT.format(**invoice),
        model=inputs.get("model") or default_model(),
        step="decide",
    )
    if refund_decision(decision) != "approve":
        await ctx.call(
            notify_team,
            step="notify",
            channel="#billing",
            text=f"refund of {invoice['invoice_id']} denied: needs a human",
        )
        return {"refunded": False, "invoice_id": invoice["invoice_id"]}
    charge = await ctx.call(
        refund_charge_async,
        step="refund",
        customer=invoice["customer"],
        amount_cents=invoice["total_cents"],
    )
    email = await ctx.call(
        send_email,
        step="email_customer",
        to=f"{invoice['customer']}@example.com",
        subject="Your refund",
        body=f"We refunded {invoice['total_cents']} cents ({charge['charge_id']}).",
    )
    await ctx.call(
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


REFUND_LOOP_SYSTEM = (
    "You settle refund requests for the billing team. Fetch every invoice named, refund each "
    "with refund_charge (the invoice's customer and total_cents), then email each customer "
    "once with send_email naming the charge id. Call independent tools in the same turn. "
    "Finish with a one-line summary."
)
REFUND_LOOP_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4.1-mini"}


@agent(
    "refund_loop",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge, send_email],
)
def refund_loop(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund invoices as a tool-use loop on a model SDK (inputs: invoice_ids, api, model)."""
    api = inputs.get("api", "anthropic")
    if api not in REFUND_LOOP_MODELS:
        raise ValueError(f"api must be anthropic or openai, not {api!r}")
    loop = messages.messages_loop if api == "anthropic" else chat.chat_loop
    answer = loop(
        ctx,
        model=inputs.get("model") or REFUND_LOOP_MODELS[api],
        system=REFUND_LOOP_SYSTEM,
        tools=[fetch_invoice, refund_charge, send_email],
        user="Please refund invoices " + ", ".join(inputs["invoice_ids"]) + ".",
        limits=Limits(max_turns=8).merged(inputs.get("limits")),
    )
    return {k: answer[k] for k in ("text", "stop_reason", "usage")}


@tool(kind="read")
def lookup_record(index: int, delay_ms: int = 0) -> dict[str, Any]:
    """A read of record ``index`` of a synthetic data set (``delay_ms`` makes it slow)."""
    faultpoints.point("lookup_record")
    if delay_ms:
        time.sleep(delay_ms / 1000)
    return {"index": index, "value": (index * 7919) % 1000}


@llm.script("summarize")
def _summarize(prompt: str, system: str) -> dict[str, Any]:
    faultpoints.point("summarize")  # inside a model step
    return {"text": f"summary of {len(prompt)} chars", "length": len(prompt)}


@agent(
    "survey",
    plan_version="1",
    divergence="replan",
    max_resumes=20,
    tools=[lookup_record, send_email],
    title=lambda inputs: f"Survey of {inputs.get('records', 10)} records",
)
def survey(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Read N records, summarise every 10th with the model, email one report (long runs)."""
    total = 0
    for i in range(int(inputs.get("records", 10))):
        record = ctx.call(
            lookup_record, step=f"record.{i}", index=i, delay_ms=int(inputs.get("delay_ms", 0))
        )
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


#: The same survey under batched durability: its reads and model steps commit 16 at a time (or
#: with the report's intent, whichever comes first) instead of one commit each.
survey_batched = agent(
    "survey_batched",
    plan_version="1",
    divergence="replan",
    max_resumes=20,
    tools=[lookup_record, send_email],
    title=lambda inputs: f"Survey of {inputs.get('records', 10)} records (batched)",
    durability="batched",
    batch_steps=16,
)(survey.fn)


@tool(kind="read")
def fetch_subscription(customer: str) -> dict[str, Any]:
    """Look a subscription up in the billing system."""
    faultpoints.point("fetch_subscription")
    if customer not in SUBSCRIPTIONS:
        raise LookupError(f"no subscription for {customer}")
    return {"customer": customer, **SUBSCRIPTIONS[customer]}


@tool(kind="read")
def fraud_check(customer: str, amount_cents: int) -> dict[str, Any]:
    """Score a charge for fraud (added in plan version 2)."""
    return {"customer": customer, "risk": "low" if amount_cents < 100000 else "review"}


@tool(kind="effect")
def charge_card_legacy(customer: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """Charge through the legacy gateway: no idempotency, no lookup (a crash needs a person)."""
    return simulators.gateway_charge(
        customer=customer, amount_cents=amount_cents, reference=idempotency_key
    )


_RENEWAL_TOOLS = [fetch_subscription, charge_card_legacy, send_email]
if RENEWAL_PLAN != "1":
    _RENEWAL_TOOLS.insert(1, fraud_check)


@agent(
    "renewal",
    plan_version=RENEWAL_PLAN,
    divergence="refuse",
    max_resumes=5,
    tools=_RENEWAL_TOOLS,
    title="Renew the subscription of {customer}",
    labels=("customer",),
    requires=("customer",),
)
def renewal(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Renew a subscription: fetch it, (plan 2: check fraud), charge the card, email a receipt."""
    sub = ctx.call(fetch_subscription, step="fetch_subscription", customer=inputs["customer"])
    if RENEWAL_PLAN != "1":
        ctx.call(
            fraud_check,
            step="fraud_check",
            customer=sub["customer"],
            amount_cents=sub["amount_cents"],
        )
    charge = ctx.call(
        charge_card_legacy,
        step="charge",
        customer=sub["customer"],
        amount_cents=sub["amount_cents"],
    )
    receipt = ctx.call(
        send_email,
        step="receipt",
        to=f"{sub['customer']}@example.com",
        subject=f"Your {sub['plan']} plan renewed",
        body=f"Charged {sub['amount_cents']} cents ({charge['gateway_ref']}).",
    )
    return {
        "renewed": True,
        "gateway_ref": charge["gateway_ref"],
        "message_id": receipt["message_id"],
    }


@agent(
    "batch_refund",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge, send_email],
    title=lambda inputs: (
        f"Refund {len(inputs['invoice_ids'])} invoices: "
        + ", ".join(map(str, inputs["invoice_ids"]))
    ),
    requires=("invoice_ids",),
)
def batch_refund(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund several invoices at once: fetch them and refund them in parallel, email a summary."""
    workers = int(inputs.get("max_workers", 4))  # how wide, not what: not part of any step
    invoices = ctx.parallel(
        {i: (fetch_invoice, {"invoice_id": i}) for i in inputs["invoice_ids"]},
        step="fetch",
        max_workers=workers,
    )
    charges = ctx.parallel(
        {
            i: (refund_charge, {"customer": inv["customer"], "amount_cents": inv["total_cents"]})
            for i, inv in invoices.items()
        },
        step="refund",
        max_workers=workers,
    )
    summary = ctx.call(
        send_email,
        step="summary",
        to="billing@example.com",
        subject=f"{len(charges)} refunds",
        body=", ".join(f"{i}: {c['charge_id']}" for i, c in charges.items()),
    )
    return {
        "charges": {i: c["charge_id"] for i, c in charges.items()},
        "message_id": summary["message_id"],
    }


@agent(
    "paged_survey",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=[lookup_record, send_email],
    title=lambda inputs: (
        f"Paged survey: records {inputs.get('start', 0)} to {inputs.get('records', 100)}"
    ),
)
def paged_survey(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Survey a long data set a page per run: each run continues as a new one (bounded ledgers)."""
    records, page = int(inputs.get("records", 100)), int(inputs.get("page", 25))
    start, total = int(inputs.get("start", 0)), int(inputs.get("total", 0))
    end = min(start + page, records)
    for i in range(start, end):
        total += ctx.call(lookup_record, step=f"record.{i}", index=i)["value"]
    ctx.call(
        send_email,
        step=f"progress.{end}",
        to=inputs.get("to", "ops@example.com"),
        subject=f"survey: {end} of {records}",
        body=f"total so far {total}",
    )
    # What the next run needs: the cursor, the running total, and the effects already sent.
    sent = {**inputs.get("sent", {}), **ctx.effects()}
    if end < records:
        ctx.continue_as_new({**inputs, "start": end, "total": total, "sent": sent})
    return {"total": total, "records": records, "emails": len(sent)}


@tool(kind="effect", reconcile=simulators.provider_lookup, approval=True)
def pay_out(
    customer: str, amount_cents: int, *, idempotency_key: str, fencing_token: int | None = None
) -> dict[str, Any]:
    """Pay money out through the payment provider: a person approves every payout first."""
    return simulators.provider_charge(
        customer=customer,
        amount_cents=amount_cents,
        idempotency_key=idempotency_key,
        fencing_token=fencing_token,
    )


@agent(
    "payout",
    plan_version="1",
    divergence="refuse",
    max_resumes=10,
    tools=[fetch_invoice, pay_out, notify_team],
    title="Pay out invoice {invoice_id}",
    labels=("invoice_id",),
    requires=("invoice_id",),
)
def payout(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Pay an invoice's total out after a person approves it; a rejection tells the team.

    ``inputs["four_eyes"]``: the payout needs two different approvers, and a rejection fails the
    run (a single call's approval, ``ctx.call(..., approval=Approval(...))``).
    """
    invoice = ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    args = {"customer": invoice["customer"], "amount_cents": invoice["total_cents"]}
    if inputs.get("four_eyes"):
        strict = Approval(approvers=2, on_reject="fail")
        charge = ctx.call(pay_out, step="pay_out", approval=strict, **args)
        return {"paid": True, "charge_id": charge["charge_id"]}
    try:
        charge = ctx.call(pay_out, step="pay_out", **args)
    except ApprovalRejected as exc:
        ctx.call(notify_team, step="notify", channel="#billing", text=f"payout rejected: {exc}")
        return {"paid": False, "rejected_by": exc.by}
    return {"paid": True, "charge_id": charge["charge_id"]}


#: What ``refund_question`` asks a person for: a decision, and a note for the customer.
REFUND_DECISION = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Refund it"},
        "note": {"type": "string", "title": "Note for the customer", "maxLength": 500},
    },
    "required": ["approve"],
    "additionalProperties": False,
}


@agent(
    "refund_after_return",
    plan_version="1",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge],
    title="Refund invoice {invoice_id} once the return arrives",
    labels=("invoice_id",),
    requires=("invoice_id",),
)
def refund_after_return(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Waits for the warehouse's ``return_received`` event (sent to the run by an application:
    ``POST /api/v1/runs/{run_id}/events``), holding no worker meanwhile, then refunds."""
    invoice = ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    ctx.emit("progress", {"waiting_for": "return_received", "invoice_id": invoice["invoice_id"]})
    days = float(inputs.get("wait_days", 14))
    parcel = ctx.wait_for_event("return_received", timeout=days * 86400, step="return")
    if parcel is None:
        ctx.emit("progress", {"outcome": "no return within the window"})
        return {"refunded": False, "why": "the return never arrived"}
    args = {"customer": invoice["customer"], "amount_cents": invoice["total_cents"]}
    charge = ctx.call(refund_charge, step="refund", **args)
    ctx.emit("progress", {"outcome": "refunded", "charge_id": charge["charge_id"]})
    return {"refunded": True, "parcel": parcel, "charge_id": charge["charge_id"]}


@agent(
    "refund_question",
    plan_version="1",
    max_resumes=5,
    tools=[fetch_invoice, refund_charge],
    title="Ask before refunding invoice {invoice_id}",
    labels=("invoice_id",),
    requires=("invoice_id",),
)
def refund_question(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Asks an operator whether to refund an invoice over the limit (``ctx.ask``): the run page
    shows a form made from ``REFUND_DECISION``; the answer decides."""
    invoice = ctx.call(fetch_invoice, step="fetch_invoice", invoice_id=inputs["invoice_id"])
    ctx.emit("progress", {"asking": "operator", "total_cents": invoice["total_cents"]})
    answer = ctx.ask(
        f"Refund {invoice['total_cents'] / 100:.2f} to {invoice['customer']} for "
        f"{invoice['invoice_id']} ({invoice['reason']})? It is over the automatic limit.",
        schema=REFUND_DECISION,
        role="operator",
        step="decision",
    )
    if not answer["approve"]:
        return {"refunded": False, "note": answer.get("note", "")}
    args = {"customer": invoice["customer"], "amount_cents": invoice["total_cents"]}
    charge = ctx.call(refund_charge, step="refund", **args)
    return {"refunded": True, "charge_id": charge["charge_id"], "note": answer.get("note", "")}
