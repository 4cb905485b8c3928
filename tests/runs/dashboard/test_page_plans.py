"""Every query of the dashboard's pages that reads ``ledger_run`` or ``ledger_step`` has a plan
without a sequential scan of either table: the pages keep their budgets at a million runs.

Each page is requested through the test client on a seeded ledger (``seed_bulk``: one real
10,000-step-shaped run kept small here, synthetic runs around it); its captured queries are
EXPLAINed with ``enable_seqscan`` off, which leaves a sequential scan in a plan only where no
index can serve the query.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from harness.management.commands.seed_bulk import Command as SeedBulk
from ledger.models import Run, Step
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans"),
]

SEQ_SCAN = re.compile(r"Seq Scan on (ledger_run|ledger_step)\b")
LEDGER_TABLES = re.compile(r'\b"?(ledger_run|ledger_step)"?\b')


@pytest.fixture
def seeded() -> dict[str, str]:
    restore_roles()
    # The benchmark's own seeding (harness equipment, not an installed app in tests).
    call_command(SeedBulk(), runs=400, steps=1600, big_steps=120, audit=200, verbosity=0)
    big = Step.objects.values_list("run_id", flat=True).order_by("-seq")[0]
    other = Run.objects.exclude(pk=big).order_by("-created_at").values_list("pk", flat=True)[0]
    return {"big": big, "other": other}


def _pages(ids: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    big, other = ids["big"], ids["other"]
    return [
        ("list, newest first", "/", {}),
        ("list, needs attention, oldest", "/?status=needs_attention&order=oldest", {}),
        ("list, lease expired", "/?status=lease_expired", {}),
        ("list, title words search", "/?q=for+cus_0042", {}),
        ("list, label search", "/?q=customer:cus_0042", {}),
        ("list, run id prefix", "/?q=run_ab", {}),
        ("list, words in any order", "/?q=CUS_0042+refund", {}),
        ("list, run id without run_", f"/?q={other[4:]}", {}),
        ("list, part of a run id", f"/?q={other[8:18]}", {}),
        ("list, effect step id and title word", "/?q=refund_charge+cus_0042", {}),
        # Most runs have it: the page comes from the newest runs' window (runs_page).
        ("list, a common word", "/?q=refund", {}),
        ("list, a common word, next page", "/?q=refund&after=CURSOR", {}),
        ("audit, run filter by title words", "/audit/?run=cus_0042+refund", {}),
        ("audit, run filter by part of an id", f"/audit/?run={other[4:14]}", {}),
        ("list, on it: nobody's", "/?taken=nobody", {}),
        ("list, on it: mine", "/?taken=mine", {}),
        ("status counts", "/", {"HX-Request": "true", "HX-Target": "status-counts"}),
        ("run page, short run", f"/runs/{other}/", {}),
        ("run page, long run", f"/runs/{big}/", {}),
        ("steps + hash compare (dry replay)", f"/runs/{big}/steps/?page=1&compare=1", {}),
        ("resume preview (dry replay)", f"/runs/{big}/preview/", {"HX-Request": "true"}),
        ("ledger.json", f"/runs/{big}/ledger.json?download=1", {}),
        ("settlement queue", "/settlements/", {}),
        ("approval queue", "/approvals/", {}),
    ]


PAGE_NAMES = [name for name, _, _ in _pages({"big": "x", "other": "y"})]


def _plans(sqls: list[str]) -> list[tuple[str, str]]:
    plans = []
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        for sql in sqls:
            cur.execute(f"EXPLAIN {sql}")
            plans.append((sql, "\n".join(row[0] for row in cur.fetchall())))
    return plans


@pytest.mark.parametrize("case", PAGE_NAMES)
def test_page_queries_use_indexes(case: str, seeded: dict[str, str]) -> None:
    name, url, headers = next(p for p in _pages(seeded) if p[0] == case)
    if "CURSOR" in url:
        url = url.replace("CURSOR", _second_page_cursor("refund"))
    client = Client()
    client.force_login(user_in("operator"))
    with connection.cursor() as cur:
        cur.execute("ANALYZE ledger_run")
        cur.execute("ANALYZE ledger_step")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, headers=headers)
        body = (
            b"".join(response.streaming_content)  # type: ignore[attr-defined]
            if response.streaming
            else response.content
        )
    assert response.status_code == 200, (name, response.status_code)
    if url.endswith("download=1"):
        assert json.loads(body)  # the whole streamed document parses
    sqls = [
        q["sql"]
        for q in captured.captured_queries
        if LEDGER_TABLES.search(q["sql"])
        and q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
    ]
    assert sqls, f"{name}: no query of ledger_run/ledger_step captured"
    scans = [(sql, plan) for sql, plan in _plans(sqls) if SEQ_SCAN.search(plan)]
    assert not scans, "\n\n".join(f"{sql}\n{plan}" for sql, plan in scans)


WORD_SEARCHES = ["CUS_0042 refund", "refund_charge cus_0042", "gave up", "inv_000042"]


@pytest.mark.parametrize("text", WORD_SEARCHES)
def test_word_search_is_the_trigram_index(text: str, seeded: dict[str, str]) -> None:
    """The words of a search are one scan of ``run_search_trgm`` (migration 0018), with the
    planner free to choose (no enable_seqscan off here): the index exists, its expression is
    the selector's, and the planner takes it even on this small table."""
    from django.utils import timezone

    from ledger import selectors

    if not _has_trgm():
        pytest.skip("pg_trgm is not installed here: the search scans")
    with connection.cursor() as cur:
        cur.execute("ANALYZE ledger_run")
    flt = selectors.RunFilter(search=text)
    qs = selectors.runs_filtered(flt=flt, now=timezone.now()).order_by("-created_at")[:51]
    sql, params = qs.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "run_search_trgm" in plan, plan
    assert not SEQ_SCAN.search(plan), plan


def test_the_index_is_over_the_selectors_expression() -> None:
    """The migration's frozen expression and ``RUN_SEARCH_DOC`` are the same text: a change to
    one without the other would leave the search scanning."""
    from importlib import import_module

    from ledger.selectors.runs import RUN_SEARCH_DOC

    migration = import_module("ledger.migrations.0018_run_search")
    assert migration.DOC == RUN_SEARCH_DOC


def _has_trgm() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'run_search_trgm'")
        return cur.fetchone() is not None


def test_the_seed_writes_the_steps_words_as_the_triggers_do(seeded: dict[str, str]) -> None:
    """``seed_bulk`` COPYs ``search_steps`` itself (so the triggers find each step's words
    there and write nothing): it is what migration 0018's fold computes from the steps."""
    with connection.cursor() as cur:
        cur.execute(
            """SELECT count(*) FROM ledger_run r LEFT JOIN (
                 SELECT run_id, left(string_agg(' ' || step_id || ' ' || coalesce(effect_key, '')
                                     || ' ' || left(error, 200), '' ORDER BY seq), 4000) AS words
                   FROM ledger_step WHERE kind = 'effect' OR error <> '' GROUP BY run_id) s
                 ON s.run_id = r.run_id
               WHERE r.search_steps IS DISTINCT FROM coalesce(s.words, '')"""
        )
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM ledger_run WHERE search_steps <> ''")
        assert cur.fetchone()[0] > 100


def test_the_transcripts_read_a_runs_model_steps_by_their_index(seeded: dict[str, str]) -> None:
    """The transcripts' reads of a run's model steps (the tool-use loop's "any model step?",
    PydanticAI's turns) are scans of ``step_run_model`` (migration 0021), not of every row of
    the run: on a 10,000-step run the index answers from the model steps alone."""
    from ledger.selectors import transcript

    big = seeded["big"]
    with connection.cursor() as cur:
        cur.execute("ANALYZE ledger_step")
    with CaptureQueriesContext(connection) as captured:
        transcript.loop_rows(run_id=big)
        transcript.pydantic_ai_turns(big)
    sqls = [q["sql"] for q in captured.captured_queries if '"kind" = ' in q["sql"]]
    assert len(sqls) >= 2, captured.captured_queries
    for sql, plan in _plans(sqls):
        assert "step_run_model" in plan, f"{sql}\n{plan}"


def _second_page_cursor(text: str) -> str:
    from django.conf import settings
    from django.utils import timezone

    from ledger import selectors

    flt = selectors.RunFilter(search=text)
    page = selectors.runs_page(flt=flt, now=timezone.now(), limit=settings.RUNLEDGER_RUNS_PER_PAGE)
    assert page.next_cursor is not None, f"{text!r} finds one page only"
    return page.next_cursor.encode()


def _all_pages(text: str, limit: int) -> list[str]:
    from django.utils import timezone

    from ledger import selectors

    flt, now = selectors.RunFilter(search=text), timezone.now()
    out, after = [], None
    while True:
        page = selectors.runs_page(flt=flt, now=now, after=after, limit=limit)
        out += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            return out
        after = page.next_cursor


@pytest.mark.parametrize("window", [1, 7, 60, 2_000])
def test_a_word_searchs_pages_are_the_same_through_the_window_or_the_index(
    window: int, seeded: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs_page`` filters the newest ``SEARCH_WINDOW`` runs row by row before it asks the
    trigram index: every page, walked by its cursors, holds what the index alone gives, in
    the same order, whether the window fills a page, falls short of it, or is the rest."""
    from django.utils import timezone

    from ledger import selectors
    from ledger.selectors import runs as runs_selectors

    monkeypatch.setattr(runs_selectors, "SEARCH_WINDOW", window)
    now = timezone.now()
    for text in [*WORD_SEARCHES, "refund", "nothing_like_this"]:
        expected = list(
            selectors.runs_filtered(flt=selectors.RunFilter(search=text), now=now)
            .order_by("-created_at", "-run_id")
            .values_list("run_id", flat=True)
        )
        for limit in (3, 50):
            assert _all_pages(text, limit) == expected, (text, window, limit)
