"""The operator's screens of issue 23, items 6 to 8: Trends (runs over time from the rollup the
database keeps), Handover (on it, take over, release, notes: each audited), and times in the
reader's own zone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.models import AuditEvent, Handover, Run, RunTrendDelta, RunTrendHour
from ledger.selectors.trends import BUCKET_EDGES, bucket_of, percentile, run_trends
from ledger.transitions.trends import fold_trends
from runs.dashboard.models import Preference
from tests.support.dashboard_runs import (
    reconciliation_run,
    restore_roles,
    rewind,
    signed_in,
    start,
    succeeded_run,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _roles(clock):
    restore_roles()
    rewind(clock)


# --- handover ------------------------------------------------------------------------------


def test_an_operator_takes_a_run_it_shows_on_the_page_and_in_the_list_and_is_audited(
    clock,
) -> None:
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    olivia = signed_in("operator", "olivia")
    page = olivia.get(f"/runs/{run.run_id}/").content.decode()
    assert "Nobody is on it." in page and "I'm on it" in page
    taken = olivia.post(f"/runs/{run.run_id}/take/", {"seen_holder": ""})
    assert taken.status_code == 302
    assert Handover.objects.get(pk=run.run_id).taken_by == "olivia"
    event = AuditEvent.objects.get(action="run_take")
    assert (event.actor, event.run_id, event.before, event.after["taken_by"]) == (
        "olivia",
        run.run_id,
        {"taken_by": ""},
        "olivia",
    )
    page = olivia.get(f"/runs/{run.run_id}/").content.decode()
    assert "<strong>olivia</strong> is on it" in page and "Release it" in page
    assert "run_take" in page  # in the run's history (its audit)
    listing = olivia.get("/").content.decode()
    assert "on it: olivia" in listing

    # A double click on "I'm on it": nothing changes, no second audit row.
    again = olivia.post(
        f"/runs/{run.run_id}/take/", {"seen_holder": ""}, headers={"HX-Request": "true"}
    )
    assert again.status_code == 200 and "on this run already" in again.content.decode()
    assert AuditEvent.objects.filter(action="run_take").count() == 1

    released = olivia.post(f"/runs/{run.run_id}/release/")
    assert released.status_code == 302 and not Handover.objects.exists()
    assert AuditEvent.objects.get(action="run_release").before["taken_by"] == "olivia"


def test_a_second_operator_taking_a_taken_run_is_told_who_has_it_and_nothing_changes(
    clock,
) -> None:
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    olivia, bob = signed_in("operator", "olivia"), signed_in("operator", "bob")
    # Both opened the page while nobody was on it; olivia clicks first.
    assert olivia.post(f"/runs/{run.run_id}/take/", {"seen_holder": ""}).status_code == 302
    late = bob.post(f"/runs/{run.run_id}/take/", {"seen_holder": ""})
    text = late.content.decode()
    assert late.status_code == 409
    assert "olivia is on this run already" in text and "Take it over from olivia" in text
    assert Handover.objects.get(pk=run.run_id).taken_by == "olivia"
    assert AuditEvent.objects.filter(action="run_take").count() == 1
    # bob may not release olivia's run either.
    refused = bob.post(f"/runs/{run.run_id}/release/", headers={"HX-Request": "true"})
    assert refused.status_code == 409 and "only they can release it" in refused.content.decode()
    assert Handover.objects.get(pk=run.run_id).taken_by == "olivia"

    # Taking it over is deliberate: the form names the holder it showed.
    over = bob.post(f"/runs/{run.run_id}/take/", {"seen_holder": "olivia"})
    assert over.status_code == 302 and Handover.objects.get(pk=run.run_id).taken_by == "bob"
    event = AuditEvent.objects.filter(action="run_take").order_by("-id").first()
    assert event is not None
    assert (event.actor, event.before["taken_by"], event.after["taken_by"]) == (
        "bob",
        "olivia",
        "bob",
    )
    assert event.reason == "took it over from olivia"


def test_a_hostile_note_is_escaped_kept_once_and_shown_in_the_history(clock) -> None:
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    olivia = signed_in("operator", "olivia")
    hostile = '<script>alert("x")</script> called the bank, <b>ref 42</b>'
    form = {"note": hostile, "key": "form-1"}
    assert olivia.post(f"/runs/{run.run_id}/note/", form).status_code == 302
    # The same form sent twice (a double click): one note.
    assert olivia.post(f"/runs/{run.run_id}/note/", form).status_code == 302
    notes = AuditEvent.objects.filter(action="run_note")
    assert [(n.actor, n.reason) for n in notes] == [("olivia", hostile)]
    page = olivia.get(f"/runs/{run.run_id}/").content.decode()
    assert "<script>alert" not in page and "<b>ref 42</b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "&lt;b&gt;ref 42&lt;/b&gt;" in page
    # An empty note is refused; an overlong one too, with the text kept in the form.
    empty = olivia.post(f"/runs/{run.run_id}/note/", {"note": "   ", "key": "form-2"})
    assert empty.status_code == 400 and "the note is empty" in empty.content.decode()
    long = "x" * 4001
    refused = olivia.post(
        f"/runs/{run.run_id}/note/", {"note": long, "key": "form-3"}, headers={"HX-Request": "1"}
    )
    assert refused.status_code == 400 and long in refused.content.decode()
    assert 'aria-invalid="true"' in refused.content.decode()
    nul = olivia.post(f"/runs/{run.run_id}/note/", {"note": "a\x00b", "key": "form-4"})
    assert nul.status_code == 400
    assert AuditEvent.objects.filter(action="run_note").count() == 1


def test_a_viewer_sees_who_is_on_it_but_cannot_take_or_note(clock) -> None:
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    signed_in("operator", "olivia").post(f"/runs/{run.run_id}/take/", {"seen_holder": ""})
    viewer = signed_in("viewer", "vic")
    page = viewer.get(f"/runs/{run.run_id}/").content.decode()
    assert "<strong>olivia</strong> is on it" in page and "Leave a note" not in page
    assert viewer.post(f"/runs/{run.run_id}/take/", {"seen_holder": "olivia"}).status_code == 403
    assert viewer.post(f"/runs/{run.run_id}/note/", {"note": "hi"}).status_code == 403
    assert Handover.objects.get(pk=run.run_id).taken_by == "olivia"
    assert not AuditEvent.objects.filter(action="run_note").exists()
    assert signed_in("operator", "x").post("/runs/run_nope/take/").status_code == 404


def test_the_list_filters_mine_and_nobodys(clock) -> None:
    mine = start("refund", {"invoice_id": "inv_1001"}, clock)
    theirs = start("refund", {"invoice_id": "inv_1002"}, clock)
    free = start("refund", {"invoice_id": "inv_1003"}, clock)
    olivia, bob = signed_in("operator", "olivia"), signed_in("operator", "bob")
    olivia.post(f"/runs/{mine.run_id}/take/", {"seen_holder": ""})
    bob.post(f"/runs/{theirs.run_id}/take/", {"seen_holder": ""})

    def shown(query: str) -> set[str]:
        html = olivia.get(f"/?{query}").content.decode()
        return {r.run_id for r in (mine, theirs, free) if f"/runs/{r.run_id}/" in html}

    assert shown("taken=mine") == {mine.run_id}
    assert shown("taken=nobody") == {free.run_id}
    assert shown("") == {mine.run_id, theirs.run_id, free.run_id}
    bad = olivia.get("/?taken=<everyone>").content.decode()
    assert "Ignored on it" in bad and "&lt;everyone&gt;" in bad


# --- times in the reader's zone -----------------------------------------------------------


def test_times_are_shown_in_the_readers_zone_with_the_zone(clock) -> None:
    # Winter: Paris is UTC+1.
    clock.now = clock.now.replace(month=1, day=15, hour=9, minute=30, second=0, microsecond=0)
    run = start("refund", {"invoice_id": "inv_1001"}, clock)
    olivia = signed_in("operator", "olivia")
    olivia.post(f"/runs/{run.run_id}/note/", {"note": "looked", "key": "k"})
    page = olivia.get(f"/runs/{run.run_id}/").content.decode()
    assert "2026-01-15 09:30:00 UTC" in page and "times in UTC" in page

    saved = olivia.post("/preferences/", {"time_zone": "Europe/Paris"})
    assert saved.status_code == 302
    assert Preference.objects.get(user__username="olivia").time_zone == "Europe/Paris"
    page = olivia.get(f"/runs/{run.run_id}/").content.decode()
    assert "2026-01-15 10:30:00 CET" in page and "times in Europe/Paris" in page
    assert "09:30:00 UTC" not in page
    # Everyone else keeps UTC; a new session of olivia's keeps Paris.
    other = signed_in("viewer", "vic").get(f"/runs/{run.run_id}/").content.decode()
    assert "2026-01-15 09:30:00 UTC" in other
    again = Client()
    again.force_login(Preference.objects.get().user)
    assert "10:30:00 CET" in again.get(f"/runs/{run.run_id}/").content.decode()


@pytest.mark.parametrize(
    "bad", ["Mars/Olympus", "<script>x</script>", "../../etc/passwd", "", "utc ", "Europe/"]
)
def test_a_zone_that_is_not_one_is_refused_and_nothing_changes(bad: str) -> None:
    olivia = signed_in("operator", "olivia")
    assert olivia.post("/preferences/", {"time_zone": "Asia/Tokyo"}).status_code == 302
    refused = olivia.post("/preferences/", {"time_zone": bad})
    text = refused.content.decode()
    assert refused.status_code == 400 and "Error:" in text and 'aria-invalid="true"' in text
    assert "<script>x" not in text
    assert Preference.objects.get().time_zone == "Asia/Tokyo"
    assert "times in Asia/Tokyo" in olivia.get("/").content.decode()


# --- trends ----------------------------------------------------------------------------------


def test_the_trigger_counts_every_status_a_run_enters_once_and_the_fold_keeps_it(
    execute, crash_at, clock
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the rollup is kept by PostgreSQL triggers")
    done = succeeded_run(execute)
    blocked = reconciliation_run(execute, crash_at)

    def entered() -> dict[str, int]:
        out: dict[str, int] = {}
        for model in (RunTrendHour, RunTrendDelta):
            for row in model.objects.all():
                out[row.status] = out.get(row.status, 0) + row.n
        return out

    before = entered()
    assert before["succeeded"] == 1 and before["needs_attention"] == 1
    assert before["queued"] == 2 and before["running"] >= 2
    assert fold_trends() > 0
    assert entered() == before and not RunTrendDelta.objects.exists()
    # A heartbeat-like write that changes no status appends nothing.
    Run.objects.filter(pk=done.run_id).update(detail="touched")
    assert not RunTrendDelta.objects.exists()
    finished = RunTrendHour.objects.get(status="succeeded")
    run = Run.objects.get(pk=done.run_id)
    assert run.finished_at is not None
    assert finished.bucket == bucket_of((run.finished_at - run.created_at).total_seconds())
    assert blocked.status == "needs_attention"


def test_the_trends_page_shows_runs_by_status_blocked_rate_and_percentiles(
    execute, crash_at, clock
) -> None:
    succeeded_run(execute)
    succeeded_run(execute, invoice="inv_1002")
    reconciliation_run(execute, crash_at)
    viewer = signed_in("viewer", "vic")
    page = viewer.get("/trends/").content.decode()
    assert '<svg class="trend-chart"' in page and '<title id="trend-title">' in page
    row = re.search(r"<tr><td>refund</td>(.*?)</tr>", page, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    # stopped, succeeded, failed, blocked, blocked rate, p50, p95
    assert cells[:5] == ["3", "2", "0", "1", "33.3 %"]
    assert cells[5].startswith("≤ ") and cells[6].startswith("≤ ")
    assert "from a histogram" in page
    week = viewer.get("/trends/?window=7d")
    assert week.status_code == 200 and "last 7d" in week.content.decode()
    bad = viewer.get("/trends/?window=<b>1y</b>")
    assert bad.status_code == 400 and "&lt;b&gt;1y" in bad.content.decode()


def test_the_trends_page_reads_neither_ledger_run_nor_ledger_step(execute, clock) -> None:
    """... for its runs' figures; the tokens and cost per agent (issue 35) read the window's model
    steps through their partial index, never the whole ledger."""
    if connection.vendor != "postgresql":
        pytest.skip("on SQLite the page counts from the runs table by design")
    succeeded_run(execute)
    viewer = signed_in("viewer", "vic")
    with CaptureQueriesContext(connection) as captured:
        assert viewer.get("/trends/?window=7d").status_code == 200
    plans = []
    usage_queries = [q["sql"] for q in captured.captured_queries if "tokens_in" in q["sql"]]
    assert len(usage_queries) == 1
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # a tiny test table: ask what it could use
        cur.execute("EXPLAIN " + usage_queries[0])
        usage_plan = "\n".join(r[0] for r in cur.fetchall())
        assert "Seq Scan on ledger_step" not in usage_plan, usage_plan  # an index serves it
    with connection.cursor() as cur:
        for query in captured.captured_queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith("SELECT") or sql in usage_queries:
                continue
            assert "ledger_run " not in sql and '"ledger_run"' not in sql, sql
            assert "ledger_step" not in sql, sql
            cur.execute("EXPLAIN " + sql)
            plans.append("\n".join(r[0] for r in cur.fetchall()))
    plan = "\n".join(plans)
    assert "ledger_runtrendhour" in plan
    assert not re.search(r"Seq Scan on ledger_(run|step)\b", plan), plan


def test_percentiles_are_read_from_the_buckets() -> None:
    # 90 runs under 100 ms, 10 runs between 1 and 2.5 s.
    histogram = {bucket_of(0.05): 90, bucket_of(2.0): 10}
    p50, p95 = percentile(histogram, 0.5), percentile(histogram, 0.95)
    assert p50 is not None and p50.upper == 0.1
    assert p95 is not None and (p95.lower, p95.upper) == (1, 2.5)
    longest = percentile({bucket_of(10**7): 1}, 0.5)
    assert longest is not None and longest.upper is None and longest.lower == BUCKET_EDGES[-1]
    assert percentile({}, 0.5) is None


def test_the_window_ends_with_the_bar_holding_now(clock) -> None:
    trend = run_trends(window="24h", now=clock())
    assert len(trend.bins) == 24 and trend.until - trend.since == timedelta(hours=24)
    assert trend.since <= clock() - timedelta(hours=23) and trend.until > clock()
