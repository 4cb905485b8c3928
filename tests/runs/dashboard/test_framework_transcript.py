"""The run page's Transcript panel for a framework agent (``ledger.adapters``): what the
PydanticAI agent was told and said, beside the step chain, each entry linked to its step."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

pytest.importorskip("pydantic_ai")

from ledger import adapters, transitions
from ledger.examples import pydantic_agents
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_page_shows_the_framework_agents_transcript_beside_the_steps(
    execute: Any,
) -> None:
    restore_roles()
    run = transitions.run_start(
        agent="refund_pydantic_ai", inputs={"invoice_ids": ["inv_1001", "inv_1003"]}
    )
    assert execute(run.run_id).status == "succeeded"
    entries = adapters.transcripts(run.run_id)["pydantic-ai"]
    assert [(e["role"], e["step_id"]) for e in entries] == [
        ("system", "agent.turn.1"),
        ("user", "agent.turn.1"),
        ("assistant", "agent.turn.1"),  # "Fetching the invoices."
        ("assistant", "agent.turn.1"),  # calls fetch_invoice(inv_1001)
        ("assistant", "agent.turn.1"),
        ("assistant", "agent.turn.2"),
        ("assistant", "agent.turn.2"),
        ("assistant", "agent.turn.3"),
        ("assistant", "agent.turn.4"),
    ]
    assert entries[0]["text"] == pydantic_agents.INSTRUCTIONS["2"]
    assert entries[1]["text"] == "Please refund invoices inv_1001, inv_1003."
    assert entries[-1]["text"] == "Refunded 2 invoices and told #billing."
    client = Client()
    client.force_login(user_in("viewer"))
    page = unescape(client.get(reverse("runs:detail", args=[run.run_id])).content.decode())
    panel = page.split('id="framework-transcript"', 1)[1].split("</section>", 1)[0]
    # Arguments wrap at their joints on a phone, never mid-word (issue 35): <wbr> after each.
    assert 'calls fetch_<wbr>invoice({"invoice_<wbr>id":<wbr>"inv_<wbr>1001"})' in panel
    panel = panel.replace("<wbr>", "")
    assert 'calls fetch_invoice({"invoice_id":"inv_1001"})' in panel
    assert "?step=agent.turn.2" in panel and "Refunded 2 invoices and told #billing." in panel
    beside = page.split('<div class="beside">', 1)[1]  # the panel, then the step chain
    assert beside.index('id="framework-transcript"') < beside.index('id="step-table"')


def test_a_run_without_a_framework_agent_has_no_framework_transcript(execute: Any) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    assert adapters.transcripts(run.run_id) == {}


def test_every_adapters_transcript_is_registered_for_the_run_page() -> None:
    from ledger import adapters

    assert {"claude-agent-sdk", "openai-agents", "pydantic-ai"} <= set(adapters.renderers())


def test_an_adapter_that_fails_to_import_leaves_the_run_page_and_the_other_transcripts(
    execute: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Claude adapter raises AgentDefinitionError at import for an SDK outside its range:
    the run page still renders the PydanticAI transcript, the import is tried once a process
    and warned about once."""
    import importlib
    import logging

    from ledger.errors import AgentDefinitionError

    restore_roles()
    run = transitions.run_start(
        agent="refund_pydantic_ai", inputs={"invoice_ids": ["inv_1001", "inv_1003"]}
    )
    assert execute(run.run_id).status == "succeeded"

    real = importlib.import_module
    tried: list[str] = []

    def import_module(name: str, package: str | None = None) -> Any:
        if name == "ledger.adapters.claude_agent_sdk":
            tried.append(name)
            raise AgentDefinitionError("claude-agent-sdk 9.9.9 is outside the range")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.setattr(adapters, "_imported", {})  # this process has not tried yet
    monkeypatch.delitem(adapters._renderers, "claude-agent-sdk", raising=False)
    caplog.set_level(logging.WARNING, logger="ledger.adapters")

    client = Client()
    client.force_login(user_in("viewer"))
    pages = [client.get(reverse("runs:detail", args=[run.run_id])) for _ in range(2)]

    assert [p.status_code for p in pages] == [200, 200]
    for response in pages:
        panel = unescape(response.content.decode()).split('id="framework-transcript"', 1)[1]
        assert "Refunded 2 invoices and told #billing." in panel.split("</section>", 1)[0]
    assert tried == ["ledger.adapters.claude_agent_sdk"]  # once, not once a page
    warned = [r for r in caplog.records if "ledger.adapters.claude_agent_sdk" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    shown = set(adapters.renderers())
    assert "pydantic-ai" in shown and "claude-agent-sdk" not in shown
    assert adapters._imported["ledger.adapters.claude_agent_sdk"] is False
