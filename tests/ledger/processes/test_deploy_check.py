"""`manage.py check_deploy` and its page: what the code loaded now would do to runs in flight.

A run of a small agent is stopped mid-way (a crash after its model step), then the agent is
"deployed" again with a change — a prompt, a plan version, a removed tool — and the check must
name the change and exit non-zero; with nothing changed it exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from harness import faults
from ledger import llm, registry, transitions
from ledger.agents import RunContext, agent, tool
from ledger.models import Run, Step
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "deploy-probe"
PROMPT = {"text": "Summarise record {n}."}


@tool(kind="read")
def deploy_lookup(n: int) -> dict[str, Any]:
    """A record."""
    return {"n": n, "value": n * 7}


@tool(kind="read")
def deploy_after(n: int) -> dict[str, Any]:
    """The step the crash interrupts."""
    faults.point("deploy_after")
    return {"n": n}


@llm.script("deploy-check")
def _summary(prompt: str, system: str) -> dict[str, Any]:
    return {"text": f"summary: {prompt}"}


def register(*, plan: str = "1", tools: tuple[Any, ...] = (deploy_lookup, deploy_after)) -> None:
    @agent(AGENT, plan_version=plan, tools=list(tools))
    def probe(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
        record = ctx.call(deploy_lookup, step="lookup", n=inputs["n"])
        summary = ctx.model(
            PROMPT["text"].format(n=record["n"]), model="scripted:deploy-check", step="summarise"
        )
        ctx.call(deploy_after, step="after", n=inputs["n"])
        return {"summary": summary["text"]}


@pytest.fixture
def in_flight(execute: Callable[..., Any], crash_at: Callable[..., None]) -> Iterator[str]:
    register()
    run_id = transitions.run_start(agent=AGENT, inputs={"n": 3}).run_id
    crash_at("deploy_after")
    execute(run_id, crash_expected=True)
    assert Run.objects.get(pk=run_id).status == "running"
    yield run_id
    registry.unregister_agent(AGENT)


def check(*args: str) -> tuple[int, list[dict[str, Any]]]:
    out = StringIO()
    try:
        call_command("check_deploy", "--json", *args, stdout=out, stderr=StringIO())
        code = 0
    except CommandError as exc:
        code = exc.returncode
    rows = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return code, rows


def test_nothing_changed_exits_zero_and_says_replay(in_flight: str) -> None:
    code, rows = check()
    assert code == 0
    assert [(r["run_id"], r["verdict"], r["blocks"]) for r in rows] == [
        (in_flight, "replay", False)
    ]
    assert "after would execute" in rows[0]["detail"]


def test_a_changed_prompt_is_flagged_stale_with_the_input_that_changed(
    in_flight: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(PROMPT, "text", "Summarise record {n} in one line.")
    code, rows = check()
    assert code == 1
    assert rows[0]["verdict"] == "stale" and rows[0]["step_id"] == "summarise"
    assert rows[0]["changed"] == ["prompt"]


def test_a_plan_version_change_is_flagged_diverged(in_flight: str) -> None:
    register(plan="2")
    code, rows = check()
    assert code == 1
    assert rows[0]["verdict"] == "diverged"
    assert "plan version '1' → '2'" in rows[0]["detail"]


def test_a_removed_tool_is_flagged_missing(in_flight: str) -> None:
    register(tools=(deploy_after,))
    code, rows = check()
    assert code == 1
    assert rows[0]["verdict"] == "missing" and "deploy_lookup" in rows[0]["detail"]


def test_the_check_reads_only(in_flight: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = list(Step.objects.filter(run_id=in_flight).values().order_by("pk"))
    run_before = Run.objects.filter(pk=in_flight).values().get()
    monkeypatch.setitem(PROMPT, "text", "changed")
    check()
    assert list(Step.objects.filter(run_id=in_flight).values().order_by("pk")) == before
    assert Run.objects.filter(pk=in_flight).values().get() == run_before


def test_the_command_prints_a_line_per_run_and_a_summary(in_flight: str) -> None:
    register(plan="2")
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("check_deploy", stdout=out)
    assert failed.value.returncode == 1
    assert "1 run(s) in flight, 1 would block" in str(failed.value)
    assert in_flight in out.getvalue() and "DIVERGED" in out.getvalue()


def test_the_deploy_page_shows_the_same_report(
    in_flight: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    restore_roles()
    client = Client()
    client.force_login(user_in("viewer"))
    monkeypatch.setitem(PROMPT, "text", "Summarise record {n}, briefly.")
    page = client.get(reverse("runs:deploy"))
    assert page.status_code == 200
    html = page.content.decode()
    assert in_flight in html and "stale" in html and "1 would block" in html


def test_the_deploy_page_needs_a_login(in_flight: str) -> None:
    page = Client().get(reverse("runs:deploy"))
    assert page.status_code == 302
