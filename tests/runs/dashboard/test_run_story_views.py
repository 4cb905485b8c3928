"""The run's story on its page (issue 23, item 2): the waterfall of steps, one bar per attempt,
drawn on the server as SVG; each step's inputs (for a viewer too, escaped, capped); the
executions; who cancelled, forked, resumed or paused the run and why; the resume preview's
words for an effect its lookup settles."""

from __future__ import annotations

import html as html_text
import re

import pytest
from django.test import Client

from ledger import registry, selectors, transitions
from ledger.models import Step
from ledger.selectors import story
from ledger.transitions.pauses import pause_create
from tests.support.dashboard_runs import (
    client_for,
    html_run,
    lookup_down_run,
    reconciliation_run,
    signed_in,
    start,
    succeeded_run,
    user_in,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    registry.unregister_agent("markup-agent")


def viewer() -> Client:
    return signed_in("viewer", "vera")


def waterfall_of(html: str) -> dict[str, list[str]]:
    """step id → the titles of its bars, from the page's SVG."""
    section = html[html.index('id="run-waterfall"') :]
    section = section[: section.index("</section>")]
    out: dict[str, list[str]] = {}
    for step_id, body in re.findall(
        r'<g class="wf-line" data-step="([^"]+)">(.*?)</g>', section, re.S
    ):
        out[step_id] = re.findall(r"<title>([^<]+)</title>", body)
    return out


def test_a_succeeded_run_draws_one_bar_per_step(execute) -> None:
    run = succeeded_run(execute)
    lines = waterfall_of(viewer().get(f"/runs/{run.run_id}/").content.decode())
    assert list(lines) == [
        "fetch_invoice",
        "decided_at",
        "decide",
        "refund",
        "email_customer",
        "notify",
    ]
    assert all(len(bars) == 1 and bars[0].endswith(", ok") for bars in lines.values())
    assert "refund (effect) attempt 1: starts +" in lines["refund"][0]


def test_each_failed_attempt_is_its_own_red_bar(execute) -> None:
    run = start("refund", {"invoice_id": "inv_missing"}, execute.clock)
    assert execute(run.run_id).status == "failed"
    rows, more = selectors.step_waterfall(run_id=run.run_id)
    assert not more and [r.step_id for r in rows] == ["fetch_invoice"]
    attempts = rows[0].attempts
    assert [(a.number, a.failed) for a in attempts] == [(1, True), (2, True), (3, True)]
    assert all(a.end is not None and a.end >= a.start for a in attempts)
    assert attempts[1].start >= attempts[0].end  # the second starts after the back-off
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    bars = waterfall_of(html)["fetch_invoice"]
    assert [b.rsplit(", ", 1)[1] for b in bars] == ["failed", "failed", "failed"]
    assert html.count('fill="#b3261e"><title>fetch_invoice') == 3


# --- the rest of the story: inputs, executions, who did what and why ---------------------------


def operator() -> Client:
    from django.contrib.auth.models import User

    found = User.objects.filter(username="olga").first()
    return client_for(found or user_in("operator", "olga"))


def test_a_viewer_reads_each_steps_inputs_escaped_but_not_the_export_or_the_actions(
    execute, crash_at
) -> None:
    run = html_run(execute, crash_at)
    client = viewer()
    html = client.get(f"/runs/{run.run_id}/").content.decode()
    inputs = re.findall(r'<details class="step-inputs">(.*?)</details>', html, re.S)
    assert len(inputs) == 2  # one per step on the page, collapsed until opened
    assert all("<pre" in block for block in inputs)
    assert "&quot;note&quot;: &quot;&lt;em&gt;hello&lt;/em&gt;&quot;" in inputs[0]
    assert "&lt;i&gt;effect&lt;/i&gt;" in inputs[1]
    assert "<em>hello</em>" not in html and "<i>effect</i>" not in html
    # What a viewer must not see: the export (and its address answers 403), the actions.
    assert "Raw JSON" not in html and "Download ledger" not in html
    assert client.get(f"/runs/{run.run_id}/ledger.json").status_code == 403
    assert 'id="run-actions"' not in html and "/settle/" not in html


def test_large_inputs_are_cut_on_the_run_page_and_whole_on_the_steps_page(execute) -> None:
    run = start("survey", {"records": 1, "to": "ops@example.com"}, execute.clock)
    assert execute(run.run_id).status == "succeeded"
    report = Step.objects.get(run=run, step_id="report")
    big = {"to": "x@example.com", "subject": "s", "body": "w " * 5_000}
    Step.objects.filter(pk=report.pk).update(inputs=big)  # as a large email body stores it
    client = viewer()
    html = client.get(f"/runs/{run.run_id}/").content.decode()
    block = re.search(
        r'<details class="step-inputs"><summary>inputs of <span class="mono">report'
        r"</span></summary>(.*?)</details>",
        html,
        re.S,
    )
    assert block is not None
    shown = re.search(r"<pre[^>]*>(.*?)</pre>", block.group(1), re.S)
    assert shown is not None
    assert len(html_text.unescape(shown.group(1))) == story.INPUTS_HEAD_CHARS
    assert "more characters" in block.group(1)
    page = client.get(f"/runs/{run.run_id}/steps/{report.pk}/result/").content.decode()
    assert page.count("w w w") > 1_000  # the step's own page has them whole


def test_a_cancelled_run_says_who_cancelled_it_and_why_escaped(execute, crash_at) -> None:
    run = reconciliation_run(execute, crash_at)
    who = user_in("operator", "oscar")
    transitions.run_cancel(
        run_id=run.run_id,
        by=who,
        reason="<script>alert(1)</script> customer asked to stop",
        seen_version=None,
        clock=execute.clock,
    )
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    header = html[html.index('id="run-cancelled"') :]
    header = header[: header.index("</div>\n  ")]
    assert "<b>oscar</b> cancelled it at" in header
    assert "&lt;script&gt;alert(1)&lt;/script&gt; customer asked to stop" in header
    assert "<script>alert(1)</script>" not in html
    acts = html[html.index('id="run-acts"') :]
    assert "<b>oscar</b> cancelled it" in acts[: acts.index("</section>")]


def test_a_fork_and_a_resume_name_who_and_why_on_both_runs(execute, crash_at) -> None:
    run = reconciliation_run(execute, crash_at)
    who = user_in("operator", "oscar")
    fork = transitions.run_fork(
        run_id=run.run_id,
        step_id="email_customer",
        by=who,
        reason="try the notification again",
        clock=execute.clock,
        confirm_resend=1,  # notify is sent again by the fork
    )
    transitions.run_resume(
        run_id=run.run_id,
        by=who,
        reason="the team channel is back",
        seen_version=None,
        clock=execute.clock,
        anyway=True,
    )
    client = viewer()
    parent = client.get(f"/runs/{run.run_id}/").content.decode()
    acts = parent[parent.index('id="run-acts"') :]
    acts = acts[: acts.index("</section>")]
    assert acts.index("resumed it") < acts.index("forked it")  # newest first
    assert "the team channel is back" in acts and "try the notification again" in acts
    assert fork.run_id in acts
    child = client.get(f"/runs/{fork.run_id}/").content.decode()
    child_acts = child[child.index('id="run-acts"') :]
    assert "<b>oscar</b> forked it from its parent" in child_acts
    assert "try the notification again" in child_acts


def test_a_paused_run_says_who_paused_it_and_why(execute) -> None:
    pause_create(scope="tool", target="send_email", by="root", reason="outbox <b>migration</b>")
    run = start("refund", {"invoice_id": "inv_1003"}, execute.clock)
    assert execute(run.run_id).status == "paused"
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    held = html[html.index('id="run-paused-by"') :]
    assert held.startswith('id="run-paused-by">Paused by <b>root</b>')
    assert "outbox &lt;b&gt;migration&lt;/b&gt;" in held[:600]


def test_the_executions_say_when_each_ended_how_and_with_which_error(execute, crash_at) -> None:
    run = reconciliation_run(execute, crash_at)
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    table = html[html.index('id="run-executions"') :]
    table = table[: table.index("</section>")]
    rows = re.findall(r"<tr><td>(\d+)</td>(.*?)</tr>", table, re.S)
    assert [n for n, _ in rows] == ["1", "2"]
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"  # in the reader's zone, UTC by default
    crashed, stopped = (re.findall(r"<td[^>]*>(.*?)</td>", body, re.S) for _, body in rows)
    # The killed worker recorded no end; the sweep's finding says how it ended.
    assert re.fullmatch(stamp, crashed[1].strip()) and "not recorded" in crashed[2]
    assert "crashed" in crashed[4]
    assert re.fullmatch(stamp, stopped[1].strip()) and re.fullmatch(stamp, stopped[2].strip())
    assert "stopped for a person" in stopped[4] and "at step" in stopped[4]
    assert "no read path" in stopped[6]


def test_the_resume_form_of_a_lookup_effect_does_not_say_it_must_be_settled(
    execute, crash_at, monkeypatch
) -> None:
    run = lookup_down_run(execute, crash_at, monkeypatch)
    html = operator().get(f"/runs/{run.run_id}/resume/").content.decode()
    assert "must be settled" not in html
    assert "Settle first" not in html and "for a person to <b>settle</b>" in html
    assert 'id="preview-asked"' in html
    assert "refund is a started effect: the resume asks its tool&#x27;s lookup first" in html
    # A tool with no read path still says a person must settle it first.
    other = reconciliation_run(execute, crash_at)
    page = operator().get(f"/runs/{other.run_id}/resume/").content.decode()
    assert "Settle first" in page and "notify must be settled" in page


def test_a_stopped_runs_open_attempt_is_drawn_to_when_it_stopped_not_to_now(
    execute, crash_at
) -> None:
    run = reconciliation_run(execute, crash_at)  # notify: started, its worker killed
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    [notify] = waterfall_of(html)["notify"]
    assert notify.endswith(", no end recorded: outcome unknown")
    # The run's clock is two hours behind the wall clock: an axis drawn to now would span them.
    span = re.search(r"\(([\d.]+) s from the first start\)", html)
    assert span is not None and float(span.group(1)) < 600
