"""The run page's mailbox (issue 33): the events sent to a run in the order they arrived, who
sent them and the step that took each; hostile names, ids and payloads shown as text."""

from __future__ import annotations

import html as html_text
from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger import api
from ledger.processes.execute import run_execute
from tests.support import wait_agents  # noqa: F401 - registers the listener
from tests.support.dashboard_runs import signed_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_the_run_page_lists_the_mailbox_escaped(dashboard_ready: Any, tmp_path: Any) -> None:
    run = start_unannounced(agent="listener", inputs={"count": 1, "marks": str(tmp_path / "marks")})
    api.send_event(run.run_id, "reply", {"text": HOSTILE}, event_id="first", by="api:shop")
    api.send_event(run.run_id, HOSTILE, HOSTILE, event_id=HOSTILE[:60])
    run_execute(run_id=run.run_id, worker="w", heartbeat=False)  # takes "first"

    page = signed_in("viewer", "vera").get(f"/runs/{run.run_id}/")

    assert page.status_code == 200
    text = page.content.decode()
    mailbox = text[text.index('id="run-mailbox"') :]
    mailbox = mailbox[: mailbox.index("</section>")]
    assert "<script>" not in mailbox and "<img" not in mailbox
    assert html_text.escape("<script>", quote=False) in mailbox
    assert mailbox.index("first") < mailbox.index("&lt;script&gt;alert")  # in arrival order
    assert "api:shop" in mailbox and "reply.<wbr>0" in mailbox  # who sent it, the step
    assert "waiting" in mailbox  # the second is not taken


def test_a_run_without_events_shows_no_mailbox(dashboard_ready: Any, tmp_path: Any) -> None:
    run = start_unannounced(agent="listener", inputs={"count": 1, "marks": str(tmp_path / "marks")})
    page = signed_in("viewer", "vera").get(f"/runs/{run.run_id}/")
    assert page.status_code == 200 and 'id="run-mailbox"' not in page.content.decode()
