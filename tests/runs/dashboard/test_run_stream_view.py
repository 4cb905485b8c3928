"""The run page shows the run's stream (``ctx.emit``): live (polled) while the run works, every
value escaped, and no longer polled once the run stopped."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from harness import faults
from ledger import transitions
from ledger.agents import agent, tool
from tests.support.dashboard_runs import signed_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

HOSTILE = "<script>alert('emitted')</script>"


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


@tool(kind="read", name="stream-view-read")
def stream_view_read(i: int) -> int:
    faults.point("stream-view.read")
    return i


@agent("stream-view", tools=[stream_view_read], max_resumes=3)
def stream_view(ctx: Any, inputs: Any) -> str:
    ctx.emit("<b>kind</b>", {"html": HOSTILE})
    ctx.call(stream_view_read, i=1)
    ctx.emit("done")
    return "ok"


def test_the_run_page_streams_live_escaped_and_stops_polling_once_settled(
    execute, crash_at
) -> None:
    run = transitions.run_start(agent="stream-view", inputs={})
    crash_at("stream-view.read")
    execute(run.run_id, crash_expected=True)  # the worker died after the first emit: running
    client: Client = signed_in("viewer")
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    section = page.split('id="run-stream"', 1)[1].split("</section>", 1)[0]
    assert f'hx-get="/runs/{run.run_id}/stream/"' in section and "every 1s" in section
    assert HOSTILE not in page and "<b>kind</b>" not in page
    assert "&lt;script&gt;alert(&#x27;emitted&#x27;)&lt;/script&gt;" in section
    assert "&lt;b&gt;kind&lt;/b&gt;" in section

    execute(run.run_id, worker="worker-2")  # resumed: the first emit is not appended again
    polled = client.get(f"/runs/{run.run_id}/stream/", headers={"HX-Request": "true"})
    html = polled.content.decode()
    assert polled.status_code == 200 and "hx-get" not in html  # settled: the last poll
    assert html.count('class="stream-event"') == 2 and ">done</b>" in html


def test_the_stream_fragment_of_an_unknown_run_is_404() -> None:
    answer = signed_in("viewer").get("/runs/run_missing0000/stream/")
    assert answer.status_code == 404
