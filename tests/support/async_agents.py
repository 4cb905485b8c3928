"""Twin agents for the async tests: ``twin_sync`` and ``twin_async`` make the same calls with the
same step ids and inputs — a read, the clock, a model call, a fan-out, a flaky read that retries,
an effect (optionally gated), and a continue-as-new — one as a plain def, one as an async def
(its own async tools beside sync ones, which run on threads)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ledger import faultpoints, llm
from ledger.agents import AsyncRunContext, RunContext, agent, off_loop, tool
from ledger.engine import pooling
from ledger.examples import simulators
from ledger.examples.agents import refund_charge, refund_charge_async

#: The threads each tool ran on, by tool name; how many failures the flaky reads have left.
THREADS: dict[str, list[str]] = {}
FLAKY = {"fails": 0}


def _seen(name: str) -> None:
    THREADS.setdefault(name, []).append(threading.current_thread().name)


@tool(kind="read")
def price(sku: str) -> dict[str, Any]:
    """A sync read (from an async agent: on a thread)."""
    _seen("price")
    faultpoints.point(f"twin.price.{sku}")
    return {"sku": sku, "cents": 100 * len(sku)}


@tool(kind="read")
def stock_sync(sku: str) -> dict[str, Any]:
    """The stock of a sku."""
    _seen("stock_sync")
    return {"sku": sku, "stock": len(sku)}


@tool(kind="read")
async def stock(sku: str) -> dict[str, Any]:
    """The stock of a sku."""
    _seen("stock")
    await asyncio.sleep(0)
    return {"sku": sku, "stock": len(sku)}


def _flake(n: int) -> int:
    if FLAKY["fails"] > 0:
        FLAKY["fails"] -= 1
        raise ConnectionError("the service hiccupped")
    return n * 2


@tool(kind="read", retries=3, backoff=1.0, jitter=0)
def flaky_sync(n: int) -> int:
    """Doubles n, after the failures it was told to have."""
    return _flake(n)


@tool(kind="read", retries=3, backoff=1.0, jitter=0)
async def flaky(n: int) -> int:
    """Doubles n, after the failures it was told to have."""
    await asyncio.sleep(0)
    return _flake(n)


@llm.script("twin")
def _twin(prompt: str, system: str) -> dict[str, Any]:
    return {"text": f"ok: {prompt}"}


def _result(p: Any, m: Any, both: Any, f: Any, charge: Any) -> dict[str, Any]:
    return {"price": p, "model": m["text"], "both": both, "flaky": f, "charge": charge["charge_id"]}


@agent("twin_sync", tools=[price, stock_sync, flaky_sync, refund_charge])
def twin_sync(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The sync twin."""
    p = ctx.call(price, step="price", sku=inputs["sku"])
    ctx.now(step="at")
    ctx.uuid(step="id")
    ctx.random(step="r")
    m = ctx.model(f"price {p['cents']}", model="scripted:twin", step="ask", tools=())
    both = ctx.parallel(
        {"s": (stock_sync, {"sku": inputs["sku"]}), "p": (price, {"sku": "x" + inputs["sku"]})},
        step="fan",
    )
    f = ctx.call(flaky_sync, step="flaky", n=p["cents"])
    charge = ctx.call(
        refund_charge,
        step="charge",
        approval=bool(inputs.get("gated")) or None,
        customer="cus_ada",
        amount_cents=f,
    )
    if inputs.get("more"):
        ctx.continue_as_new({"sku": inputs["sku"], "carried": ctx.effects()})
    return _result(p, m, both, f, charge)


@agent("twin_async", tools=[price, stock, flaky, refund_charge_async])
async def twin_async(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The async twin."""
    p = await ctx.call(price, step="price", sku=inputs["sku"])
    await ctx.now(step="at")
    await ctx.uuid(step="id")
    await ctx.random(step="r")
    m = await ctx.model(f"price {p['cents']}", model="scripted:twin", step="ask", tools=())
    both = await ctx.parallel(
        {"s": (stock, {"sku": inputs["sku"]}), "p": (price, {"sku": "x" + inputs["sku"]})},
        step="fan",
    )
    f = await ctx.call(flaky, step="flaky", n=p["cents"])
    charge = await ctx.call(
        refund_charge_async,
        step="charge",
        approval=bool(inputs.get("gated")) or None,
        customer="cus_ada",
        amount_cents=f,
    )
    if inputs.get("more"):
        ctx.continue_as_new({"sku": inputs["sku"], "carried": ctx.effects()})
    return _result(p, m, both, f, charge)


async def _backends() -> int:
    """The connections to this database that someone holds right now, counted on a connection of
    its own: every session PostgreSQL has, less those idle in this process's pool (open, but
    lent to nobody: Django's psycopg pool keeps one ready)."""

    def count() -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            )
            sessions = int(cursor.fetchone()[0])
        pool = connection.pool if pooling.pooled() else None
        return sessions - (pool.get_stats()["pool_available"] if pool is not None else 0)

    return int(await off_loop(count))


#: What ``held_connections`` saw while its tool awaited.
BACKENDS: list[int] = []


@tool(kind="read")
async def wait_and_count() -> int:
    """Counts the database's connections while the run waits in this tool."""
    seen = await _backends()
    BACKENDS.append(seen)
    return seen


@agent("held_connections", tools=[wait_and_count])
async def held_connections(ctx: AsyncRunContext, inputs: dict[str, Any]) -> int:
    """A run that waits in a tool after steps that wrote the ledger."""
    await ctx.call(price, step="before", sku="abc")
    return int(await ctx.call(wait_and_count, step="count"))


def provider_charges() -> int:
    return simulators.ProviderCharge.objects.count()
