"""Defects found in the review pass, each shown by the state after the act (real database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from harness.cluster import Cluster
from ledger import transitions
from ledger.models import AuditEvent, Run
from tests.support.dashboard_runs import restore_roles, signed_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    """A broker folder of this test's own (no workers): what the views enqueue lands here."""
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


@pytest.fixture
def operator() -> Client:
    restore_roles()
    return signed_in("operator", "olive", raise_request_exception=False)


# PostgreSQL refuses a NUL byte in any text parameter; a run id from the URL or a form reached
# the query as it was typed, and the page answered 500 instead of "no such run".
NUL_RUN_URLS = [
    "/runs/abc%00/",
    "/runs/abc%00/header/",
    "/runs/abc%00/steps/",
    "/runs/abc%00/preview/",
    "/runs/abc%00/ledger.json",
    "/runs/abc%00/steps/1/result/",
    "/runs/abc%00/steps/1/settle/",
    "/runs/abc%00/steps/1/stale/",
    "/runs/abc%00/fork/",
    "/runs/abc%00/resume/",
    "/runs/abc%00/cancel/",
]


@pytest.mark.parametrize("url", NUL_RUN_URLS)
def test_a_run_id_with_a_nul_byte_is_404_not_500(operator, url) -> None:
    assert operator.get(url).status_code == 404


def test_a_nul_byte_in_a_bulk_selection_is_a_message_not_500(operator) -> None:
    run = transitions.run_start(agent="survey", inputs={"records": 1})
    response = operator.get(f"/bulk/?action=cancel&run=a%00b&run={run.run_id}")
    assert response.status_code == 200
    assert run.run_id in response.content.decode()
    response = operator.post(
        "/bulk/apply/",
        {"action": "cancel", "reason": "x", "target": ["a\x00b:1", f"{run.run_id}:{run.version}"]},
    )
    assert response.status_code == 200
    assert "damaged target" in response.content.decode()
    assert Run.objects.get(pk=run.run_id).status == "cancelled"
    assert AuditEvent.objects.filter(run_id=run.run_id, action="run_cancel").count() == 1


def test_two_previews_at_once_leave_the_agents_divergence_policy_as_registered(
    execute, monkeypatch
) -> None:
    """The dry replay switched the registered (process-wide) agent to "refuse" while it checked
    a path and switched it back after: two previews interleaving (two dashboard threads) left a
    replanning agent registered as "refuse" for good, and any execution in the process meanwhile
    blocked on a divergence its agent would have replanned."""
    import threading

    from django.db import connections

    from ledger import registry
    from ledger.agents import agent, tool
    from ledger.engine.walk import Walk
    from ledger.processes.preview import preview_resume

    @tool(kind="read", name="race-read")
    def read(n: int) -> int:
        return n

    @agent("race-agent", divergence="replan", tools=[read])
    def body(ctx, inputs):
        return ctx.call(read, step="one", n=1)

    try:
        run = transitions.run_start(agent="race-agent", inputs={})
        assert execute(run.run_id).status == "succeeded"
        original = Walk.check_path
        b_inside, a_done = threading.Event(), threading.Event()
        seen: dict[str, str] = {}

        def check_path(self, step_id, *, accept=frozenset(), policy=None):
            name = threading.current_thread().name
            seen.setdefault(name, registry.get_agent("race-agent").divergence)
            if name == "A" and not b_inside.is_set():
                b_inside.wait(10)  # B starts its check while A's is under way
            elif name == "B" and not b_inside.is_set():
                b_inside.set()
                a_done.wait(10)  # ... and ends it after A has finished
            return original(self, step_id, accept=accept, policy=policy)

        monkeypatch.setattr(Walk, "check_path", check_path)

        def preview(done: threading.Event | None) -> None:
            try:
                preview_resume(run_id=run.run_id)
            finally:
                connections.close_all()
                if done is not None:
                    done.set()

        a = threading.Thread(target=preview, args=(a_done,), name="A")
        b = threading.Thread(target=preview, args=(None,), name="B")
        a.start()
        while "A" not in seen:
            a.join(0.01)
        b.start()
        a.join(20)
        b.join(20)
        assert registry.get_agent("race-agent").divergence == "replan"
        assert seen == {"A": "replan", "B": "replan"}
    finally:
        registry.unregister_agent("race-agent")
