"""The dashboard's read side through Django's test client, on runs the real engine left behind."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger import faultpoints, registry, selectors, transitions
from ledger.agents import agent, tool
from ledger.examples import agents as examples
from ledger.models import Run, Step
from tests.support.dashboard_runs import (
    agent_gone_run,
    budget_run,
    expired_lease_run,
    html_run,
    reconciliation_run,
    signed_in,
    stale_run,
    start,
    succeeded_run,
    survey_run,
    user_in,
)

pytestmark = [
    pytest.mark.sqlite_ok,  # the dashboard also serves the demo's SQLite file
    pytest.mark.django_db(transaction=True),
]

TEST_AGENTS = ("markup-agent", "legacy-agent", "replan-agent", "plan-agent")


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    for name in TEST_AGENTS:
        registry.unregister_agent(name)


@pytest.fixture
def operator() -> Client:
    return signed_in("operator")


@pytest.fixture
def viewer() -> Client:
    return signed_in("viewer")


def text(response) -> str:
    return response.content.decode()


def run_ids_in(html: str) -> list[str]:
    return re.findall(r'href="/runs/(run_[0-9a-f]+)/"', html)


# --- sign-in and roles ---------------------------------------------------------------------


def test_every_page_sends_a_stranger_to_the_sign_in_page(execute) -> None:
    run = succeeded_run(execute)
    client = Client()
    for url in ("/", f"/runs/{run.run_id}/", f"/runs/{run.run_id}/preview/",
                f"/runs/{run.run_id}/ledger.json"):  # fmt: skip
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_signing_in_with_the_form_opens_the_runs_list() -> None:
    user_in("viewer", name="vera")
    client = Client()
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and 'name="csrfmiddlewaretoken"' in text(page)
    bad = client.post("/accounts/login/", {"username": "vera", "password": "nope"})
    assert "did not match" in text(bad)
    good = client.post(
        "/accounts/login/", {"username": "vera", "password": "correct horse battery"}
    )
    assert good.status_code == 302 and good.url == "/"
    assert client.get("/").status_code == 200
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302


@pytest.mark.parametrize(
    ("role", "granted", "refused"),
    [
        ("viewer", {"view_dashboard"}, {"export_ledger", "operate_runs", "approve_settlements"}),
        ("operator", {"view_dashboard", "export_ledger", "operate_runs"}, {"approve_settlements"}),
        ("approver", {"view_dashboard", "approve_settlements"}, {"operate_runs"}),
        ("admin", {"view_dashboard", "operate_runs", "approve_settlements"}, set()),
    ],
)
def test_createroleuser_makes_a_user_who_holds_exactly_the_role(
    role, granted, refused, tmp_path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("pw-long-enough\n")
    call_command("createroleuser", "pat", "--role", role, "--password-file", str(secret))
    user = User.objects.get(username="pat")
    assert user.check_password("pw-long-enough")
    assert all(user.has_perm(f"runs.{p}") for p in granted)
    assert not any(user.has_perm(f"runs.{p}") for p in refused)
    assert user.is_superuser == (role == "admin")


def test_createroleuser_moves_an_existing_user_and_generates_a_password(capsys) -> None:
    call_command("createroleuser", "sam", "--role", "operator")
    out = capsys.readouterr().out
    password = out.split("password: ")[1].strip()
    call_command("createroleuser", "sam", "--role", "viewer")
    user = User.objects.get(username="sam")
    assert user.check_password(password)
    assert [g.name for g in user.groups.all()] == ["viewer"]
    assert not user.has_perm("runs.operate_runs")


def test_a_signed_in_user_without_a_role_is_refused(execute) -> None:
    run = succeeded_run(execute)
    client = signed_in("")
    assert client.get("/").status_code == 403
    assert client.get(f"/runs/{run.run_id}/").status_code == 403
    assert client.get(f"/runs/{run.run_id}/preview/").status_code == 403


def test_a_viewer_is_refused_the_ledger_export_an_operator_gets_all_of_it(
    execute, viewer, operator
) -> None:
    run = succeeded_run(execute)
    refused = viewer.get(f"/runs/{run.run_id}/ledger.json")
    assert refused.status_code == 403 and "Not allowed" in text(refused)
    # refused before the lookup: a viewer cannot probe which run ids exist this way
    assert viewer.get("/runs/run_nope/ledger.json").status_code == 403
    page = text(viewer.get(f"/runs/{run.run_id}/"))
    assert "ledger.json" not in page  # the page does not offer what the server refuses
    response = operator.get(f"/runs/{run.run_id}/ledger.json?download=1")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="{run.run_id}.ledger.json"'
    data = json.loads(b"".join(response.streaming_content))
    assert data["run"]["run_id"] == run.run_id and data["run"]["status"] == "succeeded"
    stored = list(Step.objects.filter(run=run).order_by("seq").values_list("step_id", "result"))
    assert [(s["step_id"], s["result"]) for s in data["steps"]] == stored


def test_the_ledger_export_streams_a_long_run_in_chunks_with_every_step_once(
    execute, operator
) -> None:
    run = survey_run(execute, records=1100)  # 1,211 steps: three chunks of 500
    with CaptureQueriesContext(connection) as queries:
        response = operator.get(f"/runs/{run.run_id}/ledger.json")
        body = b"".join(response.streaming_content)
    seqs = [s["seq"] for s in json.loads(body)["steps"]]
    assert seqs == sorted(Step.objects.filter(run=run).values_list("seq", flat=True))
    assert len(seqs) == 1211
    step_selects = [q for q in queries if 'FROM "ledger_step"' in q["sql"]]
    assert len(step_selects) == 3 and all("LIMIT 500" in q["sql"] for q in step_selects)


# --- bad input -----------------------------------------------------------------------------


def test_unknown_run_ids_and_steps_are_404(execute, operator) -> None:
    run = succeeded_run(execute)
    other = succeeded_run(execute, invoice="inv_1001")
    for url in ("/runs/run_nope/", "/runs/run_nope/header/", "/runs/run_nope/steps/",
                "/runs/run_nope/preview/", "/runs/run_nope/ledger.json",
                "/runs/run_nope/steps/1/result/"):  # fmt: skip
        assert operator.get(url).status_code == 404, url
    foreign = Step.objects.filter(run=other).first()
    assert operator.get(f"/runs/{run.run_id}/steps/{foreign.pk}/result/").status_code == 404
    assert "run_nope" in text(operator.get("/runs/run_nope/"))


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("status=bogus", "status"),
        ("reason=tired", "reason"),
        ("age=3x", "age"),
        ("age=-5m", "age"),
        ("age=99999999d", "age"),
        ("age=%00", "age"),
        ("q=" + "r" * 201, "search"),
        ("agent=" + "a" * 201, "agent"),
        ("order=sideways", "order"),
        ("after=not-a-cursor", "after"),
        ("after=MjAyNi0xMy00MHxydW5f", "after"),  # base64 of a cursor with a bad date
    ],
)
def test_malformed_filter_values_show_the_list_with_a_message(
    execute, viewer, query, named
) -> None:
    run = succeeded_run(execute)
    response = viewer.get(f"/?{query}&status=succeeded" if "status=" not in query else f"/?{query}")
    assert response.status_code == 200
    html = text(response)
    assert f"Ignored {named}" in html
    assert run.run_id in html  # the valid rest of the filter still lists runs


def test_a_malformed_step_page_number_shows_the_first_page(execute, viewer) -> None:
    run = succeeded_run(execute)
    for page in ("abc", "-3", "99999999999999999999", ""):
        response = viewer.get(f"/runs/{run.run_id}/?page={page}")
        assert response.status_code == 200 and "fetch_invoice" in text(response)


# --- the runs list -------------------------------------------------------------------------


def test_counts_show_each_status_each_reason_and_expired_leases(
    execute, crash_at, monkeypatch, viewer
) -> None:
    reconciliation_run(execute, crash_at)
    budget_run(execute, crash_at)
    stale_run(execute, crash_at, monkeypatch)
    succeeded_run(execute)
    expired_lease_run(execute, crash_at)
    transitions.run_start(agent="survey", inputs={"records": 2})  # queued
    counts = selectors.run_status_counts(now=timezone.now())
    assert counts.by_status["needs_attention"] == 3
    assert counts.by_reason == {
        "reconciliation": 1, "stale": 1, "divergence": 0, "budget": 1, "agent_missing": 0,
        "approval": 0, "question": 0,
    }  # fmt: skip
    assert (counts.by_status["running"], counts.lease_expired) == (1, 1)
    assert (counts.by_status["queued"], counts.by_status["succeeded"]) == (1, 1)
    html = text(viewer.get("/"))
    pairs = re.findall(r'<span class="n">(\d+)</span>\s*(?:<span class="l">)?([a-z_ ]+)', html)
    tiles = {label.strip(): n for n, label in pairs}
    assert tiles["needs attention"] == "3" and tiles["lease expired"] == "1"
    assert tiles["stale"] == "1" and tiles["budget"] == "1" and tiles["divergence"] == "0"


def test_filters_narrow_the_list(execute, crash_at, monkeypatch, viewer, clock) -> None:
    recon = reconciliation_run(execute, crash_at)
    budget = budget_run(execute, crash_at)
    stale = stale_run(execute, crash_at, monkeypatch)
    done = succeeded_run(execute)
    survey = survey_run(execute, records=3)
    expired = expired_lease_run(execute, crash_at)

    def listed(query: str) -> set[str]:
        return set(run_ids_in(text(viewer.get(f"/?{query}"))))

    assert listed("status=needs_attention") == {recon.run_id, budget.run_id, stale.run_id}
    assert listed("reason=stale") == {stale.run_id}
    assert listed("reason=budget&status=needs_attention") == {budget.run_id}
    assert listed("agent=survey") == {survey.run_id}
    assert listed("status=succeeded&agent=refund") == {done.run_id}
    assert listed("status=lease_expired") == {expired.run_id}
    assert listed(f"q={stale.run_id[:12]}") >= {stale.run_id}
    assert listed(f"q={stale.run_id}") == {stale.run_id}
    assert listed("q=run_zzzzzz") == set()
    Run.objects.filter(pk=budget.run_id).update(
        status_changed_at=timezone.now() - timedelta(days=3),
        created_at=timezone.now() - timedelta(days=3, minutes=5),
    )  # an old blocked run, as time would leave it
    assert listed("age=2d") == {budget.run_id}
    assert listed("status=needs_attention&age=1h") == {recon.run_id, budget.run_id, stale.run_id}
    oldest = run_ids_in(text(viewer.get("/?order=oldest")))
    assert oldest[0] == budget.run_id  # oldest blocked first; no status given means blocked
    assert set(oldest) == {recon.run_id, budget.run_id, stale.run_id}


def test_the_list_shows_resumes_used_of_the_budget(execute, crash_at, viewer) -> None:
    run = budget_run(execute, crash_at)
    html = text(viewer.get("/?reason=budget"))
    row = html[html.index(run.run_id) :]
    assert re.search(r'class="num over">0 / 0<', row)


def test_keyset_pages_list_every_run_once_without_offset(execute, viewer, settings) -> None:
    settings.RUNLEDGER_RUNS_PER_PAGE = 3
    made = {transitions.run_start(agent="survey", inputs={"records": i}).run_id for i in range(8)}
    seen: list[str] = []
    query = ""
    with CaptureQueriesContext(connection) as queries:
        for _ in range(5):
            html = text(viewer.get(f"/?{query}"))
            seen += run_ids_in(html)
            found = re.search(r'href="/\?([^"]+)"[^>]*rel="next"', html)
            if found is None:
                break
            query = found.group(1).replace("&amp;", "&")
    assert sorted(seen) == sorted(made) and len(seen) == 8
    assert not any("OFFSET" in q["sql"] for q in queries)


def test_list_and_run_pages_issue_a_constant_number_of_queries(execute, viewer) -> None:
    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert viewer.get(url).status_code == 200
        return len(captured)

    small = survey_run(execute, records=5)
    few = (queries("/"), queries(f"/runs/{small.run_id}/"))
    big = survey_run(execute, records=300)
    for i in range(25):
        transitions.run_start(agent="survey", inputs={"records": i})
    many = (queries("/"), queries(f"/runs/{big.run_id}/"))
    assert few == many
    assert queries(f"/runs/{big.run_id}/?page=3") == many[1]


def test_a_refresh_with_nothing_new_answers_204_and_a_change_swaps_in(
    execute, viewer, monkeypatch
) -> None:
    succeeded_run(execute)
    # The page shows ages by the minute: hold the page's clock so a minute boundary falling
    # between the two requests cannot change what they show.
    frozen = timezone.now()
    monkeypatch.setattr("runs.dashboard.views.run_list.timezone.now", lambda: frozen)
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "run-table"}
    first = viewer.get("/", **headers)
    digest = re.search(r'data-digest="([0-9a-f]+)"', text(first)).group(1)
    assert 'id="run-table"' in text(first) and "status-counts" not in text(first)
    assert viewer.get(f"/?digest={digest}", **headers).status_code == 204
    transitions.run_start(agent="survey", inputs={"records": 1})
    changed = viewer.get(f"/?digest={digest}", **headers)
    assert changed.status_code == 200 and "survey" in text(changed)


def test_the_refresh_interval_is_a_setting(viewer, settings) -> None:
    settings.RUNLEDGER_LIST_REFRESH_SECONDS = 17
    assert 'hx-trigger="every 17s, refresh"' in text(viewer.get("/"))


# --- the run page --------------------------------------------------------------------------


def test_the_run_page_shows_the_header_and_the_step_chain(execute, crash_at, viewer) -> None:
    run = reconciliation_run(execute, crash_at)
    html = text(viewer.get(f"/runs/{run.run_id}/"))
    header = html[html.index('id="run-header"') : html.index('id="step-table"')]
    assert "needs_attention" in header and "reconciliation" in header
    assert "Blocked at step" in header and ">notify</a>" in header
    assert "no read path" in header  # the detail says why
    assert "1 / 5 used" in header  # one resume of a budget of five
    assert "same as today" in header and run.tool_schema_hash[:12] in header
    order = re.findall(r'<td class="mono stepid">([^<\n]+)', html)
    assert [s.strip() for s in order] == [
        "fetch_invoice", "decided_at", "decide", "refund", "email_customer", "notify",
    ]  # fmt: skip
    assert f"{run.run_id}:notify" in html  # the effect key


def test_the_chain_follows_next_step_id_and_puts_abandoned_rows_after_it(
    execute, crash_at, viewer, clock
) -> None:
    branch = ["b", "c", "d"]

    @tool(kind="read", name="replan_read")
    def read(name: str) -> str:
        if name == "d":
            faultpoints.point("lookup_record")
        return name

    def body(ctx, inputs):
        ctx.call(read, step="a", name="a")
        ctx.call(examples.refund_charge, step="pay", customer="cus_ada", amount_cents=5)
        for name in branch:
            ctx.call(read, step=name, name=name)
        return {"done": True}

    agent("replan-agent", divergence="replan", tools=[read, examples.refund_charge])(body)
    run = start("replan-agent", {}, clock)
    crash_at("lookup_record")
    execute(run.run_id, crash_expected=True)  # died at d, after a, pay, b, c
    branch[:] = ["x", "c", "d"]  # today's code goes a → pay → x → c → d
    assert execute(run.run_id).status == "succeeded"
    by_seq = list(Step.objects.filter(run=run).order_by("seq").values_list("step_id", flat=True))
    assert by_seq == ["a", "pay", "b", "c", "x", "d"]  # seq alone would put c before x
    html = text(viewer.get(f"/runs/{run.run_id}/"))
    order = [s.strip() for s in re.findall(r'<td class="mono stepid">([^<\n]+)', html)]
    assert order == ["a", "pay", "x", "c", "d", "b"]
    assert html.count("off the chain") == 1 and "(5 on the chain, then 1 off it)" in html


def test_a_result_expands_on_demand_and_collapses_again(execute, crash_at, viewer) -> None:
    run = reconciliation_run(execute, crash_at)
    step = Step.objects.get(run=run, step_id="fetch_invoice")
    url = f"/runs/{run.run_id}/steps/{step.pk}/result/"
    expanded = text(viewer.get(url, HTTP_HX_REQUEST="true"))
    assert expanded.startswith("\n<pre") or '<pre class="json full">' in expanded
    assert '"customer": "cus_ada"' in expanded.replace("&quot;", '"')
    assert "<html" not in expanded  # a fragment, not a page
    collapsed = text(viewer.get(url + "?collapsed=1", HTTP_HX_REQUEST="true"))
    assert "expand" in collapsed and "<pre" not in collapsed
    page = text(viewer.get(url))  # without htmx: a whole page, so the link works without JS
    assert "<html" in page and "Stored inputs" in page


def test_every_value_from_a_run_is_escaped(execute, crash_at, viewer, operator) -> None:
    run = html_run(execute, crash_at)
    pages = [
        text(viewer.get("/")),
        text(viewer.get(f"/runs/{run.run_id}/?compare=1")),
        text(viewer.get(f"/runs/{run.run_id}/preview/", HTTP_HX_REQUEST="true")),
    ]
    step = Step.objects.get(run=run, step_id="<b>read</b>")
    pages.append(
        text(viewer.get(f"/runs/{run.run_id}/steps/{step.pk}/result/", HTTP_HX_REQUEST="true"))
    )
    for html in pages:
        for raw in ("<img src=x", "<script>alert", "<b>read</b>", "<em>hello", "<b>upstream"):
            assert raw not in html
    run_page = pages[1]
    assert "&lt;img src=x onerror=alert(1)&gt;" in run_page  # the blocking step id, as text
    assert "&lt;b&gt;upstream said no&lt;/b&gt;" in run_page  # attempt 1's error, as text
    assert "&lt;script&gt;alert(" in pages[3]
    export = b"".join(operator.get(f"/runs/{run.run_id}/ledger.json").streaming_content)
    assert json.loads(export)["steps"][0]["result"]["html"] == "<script>alert('result')</script>"


def test_a_stale_step_shows_both_hashes_its_diff_and_its_downstream(
    execute, crash_at, monkeypatch, viewer
) -> None:
    run = stale_run(execute, crash_at, monkeypatch)
    decide = Step.objects.get(run=run, step_id="decide")
    plain = text(viewer.get(f"/runs/{run.run_id}/"))
    assert "is-stale" not in plain and "compare input hashes" in plain  # loaded on demand
    html = text(viewer.get(f"/runs/{run.run_id}/steps/?compare=1", HTTP_HX_REQUEST="true"))
    body = html[html.index(f'id="step-{decide.pk}"') :]
    body = body[: body.index("</tbody>")]
    assert "is-stale" in body
    assert decide.input_hash[:12] in body and 'class="hash-bad"' in body
    dels = re.findall(r'<span class="d-del">([^<]*)</span>', body)
    adds = re.findall(r'<span class="d-add">([^<]*)</span>', body)
    assert any("Refund it if the reason is ours?" in line for line in dels)
    assert any("customer in good standing" in line for line in adds)
    refund = Step.objects.filter(run=run, step_id="fetch_invoice").get()
    fetch_row = html[html.index(f'id="step-{refund.pk}"') :]
    assert 'class="hash-ok"' in fetch_row[: fetch_row.index("</tbody>")]
    # refund (replayed) and email_customer (to settle) come after the stale model call
    assert html.count("Depends on a stale observation") == 2
    assert "good standing" not in plain  # without the comparison only stored values show


def test_the_preview_summarises_what_a_resume_would_do(
    execute, crash_at, monkeypatch, viewer
) -> None:
    recon = reconciliation_run(execute, crash_at)
    html = text(viewer.get(f"/runs/{recon.run_id}/preview/", HTTP_HX_REQUEST="true"))
    assert re.search(r'<span class="n">5</span> steps would <b>replay</b>', html)
    assert ">notify</a>" in html and "no reconcile: a person must settle it" in html
    assert "does not diverge" in html and "nothing was executed or written" in html
    stale = stale_run(execute, crash_at, monkeypatch)
    before = list(Step.objects.filter(run=stale).values_list("status", "attempt", "updated_at"))
    html = text(viewer.get(f"/runs/{stale.run_id}/preview/", HTTP_HX_REQUEST="true"))
    assert re.search(r'<span class="n">1</span> <b>stale</b> step, 2 downstream', html)
    assert ">email_customer</a>" in html and "has a reconcile" in html
    assert (
        list(Step.objects.filter(run=stale).values_list("status", "attempt", "updated_at"))
        == before
    )
    page = text(viewer.get(f"/runs/{stale.run_id}/preview/"))  # the href, without htmx
    assert "<html" in page and "Preview of a resume" in page


def test_the_preview_says_when_the_plan_diverges(execute, crash_at, viewer, clock) -> None:
    def body(ctx, inputs):
        return ctx.call(examples.fetch_invoice, step="fetch", invoice_id="inv_1001")

    agent("plan-agent", plan_version="1", tools=[examples.fetch_invoice])(body)
    run = start("plan-agent", {}, clock)
    crash_at("fetch_invoice")
    execute(run.run_id, crash_expected=True)
    agent("plan-agent", plan_version="2", tools=[examples.fetch_invoice])(body)
    page = text(viewer.get(f"/runs/{run.run_id}/"))
    assert "today: 2" in page  # the header says today's code differs
    html = text(viewer.get(f"/runs/{run.run_id}/preview/", HTTP_HX_REQUEST="true"))
    assert "plan <b>diverges</b>" in html and "plan version &#x27;1&#x27; → &#x27;2&#x27;" in html
    assert "start a clean run" in html


def test_a_run_whose_agent_code_is_gone_still_shows_its_ledger(execute, crash_at, viewer) -> None:
    run = agent_gone_run(execute, crash_at)
    page = text(viewer.get(f"/runs/{run.run_id}/"))
    assert "code not found here" in page and "legacy-agent" in page
    assert ">lookup</td>" in page.replace('<td class="mono stepid">lookup\n', ">lookup</td>")
    compared = text(viewer.get(f"/runs/{run.run_id}/?compare=1"))
    assert "no comparison" in compared and "not available here" in compared
    preview = text(viewer.get(f"/runs/{run.run_id}/preview/", HTTP_HX_REQUEST="true"))
    assert "Preview unavailable" in preview
    assert "agent &#x27;legacy-agent&#x27; is not available here" in preview


def test_a_step_link_opens_the_page_that_holds_it(execute, viewer, settings) -> None:
    settings.RUNLEDGER_STEPS_PER_PAGE = 10
    run = survey_run(execute, records=40)  # 45 steps: five pages
    html = text(viewer.get(f"/runs/{run.run_id}/?step=record.25"))
    assert '<span class="current">3</span>' in html and 'id="focus"' in html
    assert "record.25" in html and "record.5\n" not in html


def test_the_dry_replay_is_bounded_in_time(execute, crash_at, viewer, settings) -> None:
    settings.RUNLEDGER_PREVIEW_SECONDS = 0  # the deadline has passed before the first step
    run = reconciliation_run(execute, crash_at)
    preview = text(viewer.get(f"/runs/{run.run_id}/preview/", HTTP_HX_REQUEST="true"))
    assert "stopped after 0" in preview and "the rest was not walked" in preview
    compared = text(viewer.get(f"/runs/{run.run_id}/?compare=1"))
    assert "later steps not compared" in compared and "not reached" in compared


def test_an_active_runs_header_refreshes_itself_a_blocked_ones_does_not(
    execute, crash_at, viewer
) -> None:
    running = expired_lease_run(execute, crash_at)
    header = text(viewer.get(f"/runs/{running.run_id}/header/", HTTP_HX_REQUEST="true"))
    assert f'hx-get="/runs/{running.run_id}/header/"' in header and "data-poll" in header
    assert "lease expired — waiting for the sweep" in header and "worker-1" in header
    blocked = reconciliation_run(execute, crash_at)
    header = text(viewer.get(f"/runs/{blocked.run_id}/header/", HTTP_HX_REQUEST="true"))
    assert "hx-trigger" not in header


def test_the_header_links_parent_and_children(execute, crash_at, viewer) -> None:
    parent = reconciliation_run(execute, crash_at)
    child = succeeded_run(execute)
    # Forking is issue 5's operator action; until it lands the link is set directly.
    Run.objects.filter(pk=child.run_id).update(
        parent=parent, parent_kind="fork", forked_from_step_id="email_customer"
    )
    html = text(viewer.get(f"/runs/{parent.run_id}/"))
    assert f'fork: <a class="mono" href="/runs/{child.run_id}/">' in html
    html = text(viewer.get(f"/runs/{child.run_id}/"))
    assert f'fork of <a class="mono" href="/runs/{parent.run_id}/">' in html
    assert "email_customer" in html
