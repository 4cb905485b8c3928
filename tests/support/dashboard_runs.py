"""Runs in every state the dashboard shows, built by the real engine (no hand-made rows).

Each builder starts a run and drives it with ``execute`` (a worker's execution, see conftest)
and named crash points, so the ledger is what a crashed worker leaves behind.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from importlib import import_module
from typing import Any

from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import faultpoints, registry
from ledger.agents import agent, tool
from ledger.examples import agents as examples
from ledger.models import Run, Step
from runs.dashboard.roles import user_set_role

PASSWORD = "correct horse battery"
# Today's prompt: same facts, new instructions (the scripted model still reads the amount).
CHANGED_PROMPT = (
    "Invoice {invoice_id} for {customer}: {total_cents} cents, reason: {reason}. "
    "Refund it only for a customer in good standing; answer approve or deny with the amount."
)


def restore_roles() -> None:
    """Re-create the roles exactly as migration 0002 does (a transactional test's flush
    empties every table, the migration's groups included)."""
    from django.apps import apps

    import_module("runs.dashboard.migrations.0002_roles").create_roles(apps, None)


def user_in(role: str, name: str | None = None) -> User:
    user = User.objects.create_user(username=name or f"{role}-user", password=PASSWORD)
    if role:
        user_set_role(user=user, role=role)
    return user


def client_for(user: User, *, csrf: bool = False, **options: Any) -> Client:
    """A test client signed in as ``user`` (``csrf``: it enforces CSRF checks, as a browser's
    requests meet them)."""
    client = Client(enforce_csrf_checks=csrf, **options)
    client.force_login(user)
    return client


def signed_in(role: str, name: str | None = None, **options: Any) -> Client:
    """A test client signed in as a new user ``name`` with ``role`` (``user_in``)."""
    return client_for(user_in(role, name), **options)


def rewind(clock: Any, hours: float = 2) -> None:
    """Put the fake clock in the recent past, so ages on the pages read as real ones."""
    clock.now = timezone.now() - timedelta(hours=hours)


def start(agent_name: str, inputs: dict[str, Any], clock: Any, **kwargs: Any) -> Run:
    """Start a run on the test's clock (the same clock the worker's writes use). Held: the test
    executes it itself, so no worker is told (what the views queue later is announced)."""
    return start_unannounced(agent=agent_name, inputs=inputs, clock=clock, **kwargs)


def reconciliation_run(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Run:
    """A refund whose team notification (no read path) crashed after sending: blocked."""
    run = start("refund", {"invoice_id": "inv_1001"}, execute.clock)
    crash_at("notify.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "reconciliation")
    return Run.objects.get(pk=run.run_id)


def stale_run(execute: Callable[..., Any], crash_at: Callable[..., None], monkeypatch: Any) -> Run:
    """A refund that crashed before its email; then the prompt changed: the model step is stale.

    The changed prompt stays in place (monkeypatch) for the rest of the test.
    """
    run = start("refund", {"invoice_id": "inv_1001"}, execute.clock)
    crash_at("email.before_effect")
    execute(run.run_id, crash_expected=True)
    monkeypatch.setattr(examples, "REFUND_PROMPT", CHANGED_PROMPT)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "stale",
        "decide",
    )
    return Run.objects.get(pk=run.run_id)


def budget_run(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Run:
    """A refund with no resume budget whose first execution crashed: stopped at the budget."""
    run = start("refund", {"invoice_id": "inv_1003"}, execute.clock, max_resumes=0)
    crash_at("fetch_invoice")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "budget")
    return Run.objects.get(pk=run.run_id)


def succeeded_run(execute: Callable[..., Any], invoice: str = "inv_1003") -> Run:
    run = start("refund", {"invoice_id": invoice}, execute.clock)
    assert execute(run.run_id).status == "succeeded"
    return Run.objects.get(pk=run.run_id)


def expired_lease_run(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Run:
    """A worker died mid-run: still `running`, its lease expired, waiting for the sweep."""
    run = start("refund", {"invoice_id": "inv_1001"}, execute.clock)
    crash_at("charge.after_effect")
    execute(run.run_id, crash_expected=True)
    return Run.objects.get(pk=run.run_id)


def survey_run(execute: Callable[..., Any], records: int) -> Run:
    run = start("survey", {"records": records}, execute.clock)
    # The execution has no heartbeat (the clock is fake), and the fence measures its lease on
    # the real monotonic clock: a long survey on a busy machine can outlast a 30 s lease.
    with override_settings(RUNLEDGER_LEASE_SECONDS=3600):
        assert execute(run.run_id).status == "succeeded"
    return Run.objects.get(pk=run.run_id)


@tool(kind="read", name="legacy_lookup")
def legacy_lookup(key: str) -> dict[str, Any]:
    """A read whose agent will be deleted."""
    return {"key": key, "found": True}


def agent_gone_run(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Run:
    """A run whose agent was registered when it ran, then removed from the code."""

    def body(ctx: Any, inputs: dict[str, Any]) -> Any:
        first = ctx.call(legacy_lookup, step="lookup", key=inputs["key"])
        ctx.call(examples.fetch_invoice, step="fetch_invoice", invoice_id="inv_1001")
        return first

    agent("legacy-agent", tools=[legacy_lookup, examples.fetch_invoice])(body)
    try:
        run = start("legacy-agent", {"key": "k1"}, execute.clock)
        crash_at("fetch_invoice")
        execute(run.run_id, crash_expected=True)
    finally:
        registry.unregister_agent("legacy-agent")
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "agent_missing")
    return Run.objects.get(pk=run.run_id)


def html_run(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Run:
    """A run whose step id, inputs, results and errors are all markup: it must show as text."""
    hostile = "<img src=x onerror=alert(1)>"

    failures = [1]

    @tool(kind="read", name="markup_read")
    def markup_read(note: str) -> dict[str, Any]:
        if failures[0]:
            failures[0] -= 1
            raise ValueError("<b>upstream said no</b>")  # recorded as attempt 1's error
        return {"html": "<script>alert('result')</script>", "note": note}

    @tool(kind="effect", name="markup_effect")
    def markup_effect(note: str, *, idempotency_key: str) -> dict[str, Any]:
        faultpoints.point("notify.after_effect")
        return {"ok": True}

    def body(ctx: Any, inputs: dict[str, Any]) -> Any:
        ctx.call(markup_read, step="<b>read</b>", note=inputs["note"])
        return ctx.call(markup_effect, step=hostile, note="<i>effect</i>")

    agent("markup-agent", tools=[markup_read, markup_effect])(body)  # tests unregister it
    run = start("markup-agent", {"note": "<em>hello</em>"}, execute.clock)
    crash_at("notify.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.step_id) == ("needs_attention", hostile)
    return Run.objects.get(pk=run.run_id)


def renewal_run(
    execute: Callable[..., Any],
    crash_at: Callable[..., None],
    point: str = "gateway.after_effect",
    customer: str = "cus_hopper",
) -> Run:
    """A renewal whose card charge (a legacy gateway: no lookup) crashed at ``point``.

    ``gateway.after_effect``: the gateway charged, the answer was lost. ``gateway.before_effect``:
    the intent was committed, the gateway never called. Either way nobody can look it up: the
    resume stops with reason ``reconciliation`` for a person to settle.
    """
    run = start("renewal", {"customer": customer}, execute.clock)
    crash_at(point)
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "reconciliation",
        "charge",
    )
    return Run.objects.get(pk=run.run_id)


def lookup_down_run(
    execute: Callable[..., Any], crash_at: Callable[..., None], monkeypatch: Any
) -> Run:
    """A refund whose charge crashed after the provider took it, resumed while the provider's
    lookup was down: blocked on reconciliation, though its tool has a read path. The lookup
    is down until the test's ``monkeypatch.delenv("RUNLEDGER_PROVIDER_LOOKUP")``."""
    run = start("refund", {"invoice_id": "inv_1001"}, execute.clock)
    crash_at("charge.after_effect")
    execute(run.run_id, crash_expected=True)
    monkeypatch.setenv("RUNLEDGER_PROVIDER_LOOKUP", "down")
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "reconciliation",
        "refund",
    )
    return Run.objects.get(pk=run.run_id)


def held_polls(page: Any, selector: str) -> int:
    """How many polls of a ``data-poll`` element dashboard.js has held back so far."""
    return int(page.eval_on_selector(selector, "e => +(e.dataset.heldPolls || 0)"))


def wait_for_held_polls(page: Any, selector: str, count: int) -> None:
    """Until ``count`` more polls of the element came due and were held back: a condition
    (the page's own timer ticked that often), not a fixed wait."""
    target = held_polls(page, selector) + count
    page.wait_for_function(
        "([sel, n]) => +(document.querySelector(sel).dataset.heldPolls || 0) >= n",
        arg=[selector, target],
        timeout=120_000,
    )


def evidence_seen(client: Client, step: Step) -> str:
    """The token the settle page's Approve carries (this person opened the evidence): read
    from the page as a person's browser would send it."""
    page = client.get(f"/runs/{step.run_id}/steps/{step.pk}/settle/").content.decode()
    found = re.search(r'name="evidence_seen" value="([^"]+)"', page)
    assert found is not None, "the settle page offers no Approve"
    return found.group(1)
