"""An agent module imports, and its tools and scripted models run, with no Django settings —
as an author checks a new module (``python -c "import acme_agents.refunds"``) or unit-tests a
tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.sqlite_ok

AGENT_MODULE = """
from ledger import llm
from ledger.agents import NOT_HAPPENED, RunContext, agent, tool

CHARGES = {}


@tool(kind="read")
def fetch_invoice(invoice_id: str) -> dict:
    return {"invoice_id": invoice_id, "customer": "cus_1", "total": 1200}


def lookup_refund(effect_key: str):
    return CHARGES.get(effect_key, NOT_HAPPENED)


@tool(kind="effect", reconcile=lookup_refund)
def refund(customer: str, amount_cents: int, *, idempotency_key: str) -> dict:
    CHARGES[idempotency_key] = {"refund": f"re_{len(CHARGES) + 1}", "amount": amount_cents}
    return CHARGES[idempotency_key]


@llm.script("acme-decide")
def decide(prompt: str, system: str) -> dict:
    return {"text": "refund" if "1200" in prompt else "keep"}


@agent("acme-refund", plan_version="1", tools=[fetch_invoice, refund])
def refund_agent(ctx: RunContext, inputs: dict) -> dict:
    invoice = ctx.call(fetch_invoice, invoice_id=inputs["invoice_id"])
    decision = ctx.model(f"Refund {invoice['total']}?", model="scripted:acme-decide")
    if decision["text"] != "refund":
        return {"refunded": False}
    return ctx.call(refund, customer=invoice["customer"], amount_cents=invoice["total"])
"""

CHECK = """
import json, sys
import acme_agents.refunds as m
from ledger import registry
first = m.refund("cus_1", 1200, idempotency_key="k1")
out = {
    "read": m.fetch_invoice("inv_1"),
    "effect": first,
    "lookup": m.lookup_refund("k1"),
    "unknown_is_not_happened": m.lookup_refund("k2") is m.NOT_HAPPENED,
    "model": m.decide("Refund 1200?", ""),
    "registered": "acme-refund" in registry.agents(),
    "tables": sorted(n for n in sys.modules if n in ("ledger.models", "ledger.transitions",
                                                    "ledger.selectors", "django.contrib.auth")),
    "settings_configured": __import__("django.conf").conf.settings.configured,
}
print(json.dumps(out))
"""


def test_an_agent_module_imports_and_its_tools_run_without_django_settings(tmp_path: Path):
    package = tmp_path / "acme_agents"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "refunds.py").write_text(textwrap.dedent(AGENT_MODULE))
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["read"] == {"invoice_id": "inv_1", "customer": "cus_1", "total": 1200}
    assert out["effect"] == {"refund": "re_1", "amount": 1200} == out["lookup"]
    assert out["unknown_is_not_happened"] is True
    assert out["model"] == {"text": "refund"}
    assert out["registered"] is True
    assert out["tables"] == []
    assert out["settings_configured"] is False
