"""The runs list's search takes words in any order and any case, across a run's title, labels,
id (with or without ``run_``), blocked step and errors, and its effect steps' ids and keys and
its failed steps' errors (issue 23, item 5); the audit's run filter takes a part of an id or
words of a title. Hostile text is searched for as text. On SQLite (sqlite_ok) the same words
find the same runs through the scanning fallback."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from ledger import registry, selectors
from ledger.agents import agent, tool
from ledger.models import Run, RunSearchDelta, Step
from ledger.transitions.search import fold_search_words
from tests.support.dashboard_runs import (
    renewal_run,
    start,
    succeeded_run,
    user_in,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    registry.unregister_agent("search-failing")


def found(text: str, clock) -> set[str]:
    fold_search_words()  # what the sweep does every pass: the steps' words into their runs
    flt = selectors.RunFilter(search=text)
    return {r.run_id for r in selectors.runs_page(flt=flt, now=clock(), limit=200).runs}


@tool(kind="read", name="search_quota_probe", retries=0, non_retryable=ValueError)
def quota_probe(tenant: str) -> dict:
    raise ValueError(f"quota exhausted for tenant {tenant}")


def failing_run(execute) -> Run:
    """A run whose step ``probe_quota`` failed with an error naming tenant zebrafinch."""

    @agent("search-failing", tools=(quota_probe,))
    def body(ctx, inputs):
        return ctx.call(quota_probe, step="probe_quota", tenant=inputs["tenant"])

    run = start("search-failing", {"tenant": "zebrafinch"}, execute.clock)
    outcome = execute(run.run_id)
    assert outcome.status == "failed", outcome
    return Run.objects.get(pk=run.run_id)


def test_words_in_any_order_and_case_find_the_run(execute, crash_at, clock) -> None:
    refund = succeeded_run(execute, invoice="inv_1004")
    other = succeeded_run(execute, invoice="inv_1005")
    knuth = renewal_run(execute, crash_at, customer="cus_knuth")
    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    assert found("REFUND inv_1004", clock) == {refund.run_id}
    assert found("inv_1004 refund", clock) == {refund.run_id}
    assert found("subscription knuth", clock) == {knuth.run_id}
    assert found("KNUTH renew", clock) == {knuth.run_id}
    assert found("subscription", clock) == {knuth.run_id, hopper.run_id}
    assert found("refund nobody", clock) == set()
    assert other.run_id not in found("inv_1004", clock)


def test_a_run_id_with_or_without_its_prefix_or_a_part_of_it(execute, clock) -> None:
    refund = succeeded_run(execute, invoice="inv_1004")
    succeeded_run(execute, invoice="inv_1005")
    bare = refund.run_id.removeprefix("run_")
    assert found(refund.run_id, clock) == {refund.run_id}
    assert found(bare, clock) == {refund.run_id}
    assert found(bare.upper(), clock) == {refund.run_id}
    assert refund.run_id in found(bare[3:14], clock)  # a part from the middle
    assert found(f"{bare[:10]} refund", clock) == {refund.run_id}


def test_effect_keys_step_ids_and_errors_find_their_runs(execute, crash_at, clock) -> None:
    knuth = renewal_run(execute, crash_at, customer="cus_knuth")
    refund = succeeded_run(execute, invoice="inv_1004")
    failed = failing_run(execute)
    effect = Step.objects.filter(run_id=refund.run_id, kind="effect").order_by("seq").last()
    key = effect.effect_key if effect else ""
    assert key and refund.run_id in found(key, clock)
    charge = Step.objects.get(run_id=knuth.run_id, step_id="charge")
    assert knuth.run_id in found(charge.effect_key, clock)
    assert found("charge knuth", clock) == {knuth.run_id}  # the blocked step's id, a title word
    assert found("probe_quota", clock) == {failed.run_id}  # a failed step's id
    assert found("zebrafinch exhausted", clock) == {failed.run_id}  # its error
    if connection.vendor == "postgresql":
        # The step's words reach the run through the triggers of migration 0018 and the fold.
        stored = Run.objects.get(pk=refund.run_id).search_steps
        assert key in stored
        assert "zebrafinch" in Run.objects.get(pk=failed.run_id).search_steps


@pytest.mark.parametrize(
    "text",
    [
        "%",
        "_",
        "\\",
        "%%%%",
        "run_%",
        "'; DROP TABLE ledger_run; --",
        '"><script>alert(1)</script>',
        "a\x00b refund",
        "\ud800 refund",
        "refund " * 500,
        "x" * 5000,
        "customer:%",
        "é ü 漢字 🙂",
        "(",
        ")*+?[]{}|^$",
    ],
)
def test_hostile_text_is_searched_for_as_text(text, execute, clock) -> None:
    refund = succeeded_run(execute, invoice="inv_1004")
    matches = found(text, clock)
    wild = text.strip() in {"%", "%%%%", "run_%", "customer:%", "\\"}  # not in any run
    if wild:
        assert matches == set()  # a LIKE wildcard is a character here, not "anything"
    assert Run.objects.filter(pk=refund.run_id).exists()
    client = Client()
    client.force_login(user_in("viewer"))
    response = client.get("/", {"q": text.replace("\x00", "").encode("utf-8", "replace")})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html


def test_the_list_page_finds_by_words(execute, crash_at, clock) -> None:
    knuth = renewal_run(execute, crash_at, customer="cus_knuth")
    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    client = Client()
    client.force_login(user_in("viewer"))
    html = client.get("/", {"q": "subscription knuth"}).content.decode()
    assert knuth.run_id in html and hopper.run_id not in html


def test_the_audit_run_filter_takes_part_of_an_id_or_title_words(execute, crash_at, clock) -> None:
    from ledger import transitions

    knuth = renewal_run(execute, crash_at, customer="cus_knuth")
    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    operator = user_in("operator")
    for run in (knuth, hopper):
        transitions.run_cancel(
            run_id=run.run_id,
            by=operator,
            reason=f"audit filter test {run.run_id}",
            seen_version=None,
            clock=clock,
        )
    client = Client()
    client.force_login(operator)

    def shown(text: str) -> tuple[bool, ...]:
        html = client.get("/audit/", {"run": text}).content.decode()
        return (
            f"audit filter test {knuth.run_id}" in html,
            f"audit filter test {hopper.run_id}" in html,
        )

    assert shown(knuth.run_id) == (True, False)
    assert shown(knuth.run_id.removeprefix("run_")[:12]) == (True, False)
    assert shown("subscription knuth") == (True, False)
    assert shown("subscription") == (True, True)
    assert shown("nobody at all") == (False, False)
    page = client.get("/audit/").content.decode()
    assert "Renew the subscription of cus_knuth" in page  # the audit names runs by title


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the triggers of migration 0018")
def test_the_triggers_keep_effect_and_failed_steps_words_once(execute, crash_at, clock) -> None:
    """``search_steps`` holds each effect step's and failed step's words once, in the order
    they were first written, and nothing of the run's reads and model calls."""
    from tests.support.dashboard_runs import survey_run

    runs = [
        survey_run(execute, records=12),  # 12 reads, model calls, one effect
        renewal_run(execute, crash_at, customer="cus_knuth"),  # an effect written twice
        failing_run(execute),
    ]
    assert RunSearchDelta.objects.exists()  # the triggers appended; the runs are not touched
    fold_search_words()
    assert not RunSearchDelta.objects.exists()
    assert fold_search_words() == 0  # a second fold finds nothing to add
    for run in runs:
        steps = Step.objects.filter(run_id=run.run_id).order_by("seq")
        expected = "".join(
            f" {s.step_id} {s.effect_key or ''} {s.error[:200]}"
            for s in steps
            if s.kind == "effect" or s.error
        )
        assert Run.objects.get(pk=run.run_id).search_steps == expected
    for run in runs[:2]:  # they have reads and model calls, and those were left out
        assert Step.objects.filter(run_id=run.run_id).exclude(kind="effect").filter(error="")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the triggers of migration 0018")
def test_the_sweep_folds_the_steps_words_so_an_effect_key_is_found(execute, clock) -> None:
    """The triggers only append to ``ledger_runsearchdelta``; a pass of the sweep moves the
    words into the run, after which the effect key finds it through the run's text alone."""
    from ledger.processes import sweep

    refund = succeeded_run(execute, invoice="inv_1004")
    effect = Step.objects.filter(run_id=refund.run_id, kind="effect").order_by("seq").last()
    assert effect is not None and effect.effect_key
    assert RunSearchDelta.objects.filter(run_id=refund.run_id).exists()
    assert effect.effect_key not in Run.objects.get(pk=refund.run_id).search_steps
    sweep.runs_sweep(clock=clock)
    assert not RunSearchDelta.objects.filter(run_id=refund.run_id).exists()
    assert effect.effect_key in Run.objects.get(pk=refund.run_id).search_steps
    flt = selectors.RunFilter(search=effect.effect_key)  # no fold here: the sweep's is enough
    assert refund.run_id in {r.run_id for r in selectors.runs_page(flt=flt, now=clock()).runs}
