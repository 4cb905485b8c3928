"""The agent author's API.

from ledger.agents import agent, tool, NOT_HAPPENED

@tool(kind="read")
async def fetch_invoice(invoice_id: str) -> dict: ...      # async def or def

@agent("refund", plan_version="2", tools=[fetch_invoice, charge])
async def refund(ctx, inputs):                              # an async agent awaits its calls
    invoice = await ctx.call(fetch_invoice, invoice_id=inputs["invoice_id"])
    return await ctx.call(charge, customer=invoice["customer"], amount_cents=-invoice["total"])

``await off_loop(fn, *args)`` calls sync code (a blocking client, the Django ORM) from async
agent code on a thread, giving back any database connection it took.

A sync agent is a plain def and calls the same way without ``await``:

@tool(kind="effect", reconcile=lookup_charge)
def charge(customer: str, amount_cents: int, *, idempotency_key: str) -> dict: ...

@tool(kind="effect", reconcile=lookup_payout, approval=True)   # a person approves each call
def pay_out(customer: str, amount_cents: int, *, idempotency_key: str) -> dict: ...

@agent("refund", plan_version="2", tools=[fetch_invoice, charge])
def refund(ctx, inputs):
    invoice = ctx.call(fetch_invoice, invoice_id=inputs["invoice_id"])
    decision = ctx.model("Refund this invoice? ...", model="scripted:refund")
    return ctx.call(charge, customer=invoice["customer"], amount_cents=-invoice["total"])
"""

from __future__ import annotations

from ledger.engine import AsyncRunContext, RunContext
from ledger.engine.aio import call_async as off_loop
from ledger.errors import ApprovalRejected, NotAwaited, RunCancelled
from ledger.registry import NOT_HAPPENED, Agent, Approval, Tool, agent, tool

__all__ = [
    "NOT_HAPPENED",
    "Agent",
    "Approval",
    "ApprovalRejected",
    "AsyncRunContext",
    "NotAwaited",
    "RunCancelled",
    "RunContext",
    "Tool",
    "agent",
    "off_loop",
    "tool",
]
