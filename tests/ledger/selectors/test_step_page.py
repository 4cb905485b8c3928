"""The run page's step pages (``selectors.step_page``) are the walked chain's pages: on
PostgreSQL a run whose ``next_step_id`` chain runs in ``seq`` order is paged on the (run, seq)
index without loading its rows, and a run whose chain does not is walked; both give the pages,
the counts and the positions ``step_chain`` gives."""

from __future__ import annotations

import pytest

from ledger import selectors
from ledger.models import Step
from tests.support.dashboard_runs import survey_run

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


def _same_as_the_chain(run_id: str, per_page: int) -> None:
    chain = selectors.step_chain(run_id=run_id)
    pages = -(-len(chain.pks) // per_page)
    for number in range(0, pages + 2):  # 0 and pages + 1 are clamped
        table = selectors.step_page(run_id=run_id, page=number, per_page=per_page)
        expect = min(max(number, 1), pages)
        assert table.number == expect
        assert table.pks == chain.pks[(expect - 1) * per_page : expect * per_page]
        assert (table.total, table.on_chain) == (len(chain.pks), chain.on_chain)
    for step_id, position in list(chain.index_of.items())[::5]:
        table = selectors.step_page(
            run_id=run_id, page=1, per_page=per_page, focus=step_id, blocked=step_id
        )
        assert table.positions == {step_id: position}
        assert table.number == position // per_page + 1
        assert chain.pks.index(table.pks[position % per_page]) == position
    missing = selectors.step_page(run_id=run_id, page=2, per_page=per_page, focus="nope")
    assert missing.positions == {} and missing.number == min(2, pages)


def test_pages_of_a_run_in_seq_order_and_of_a_broken_chain(execute) -> None:
    run = survey_run(execute, records=30)
    _same_as_the_chain(run.run_id, per_page=7)
    # A chain cut half way (as a replanned branch leaves rows off it): walked, same answer.
    cut = Step.objects.filter(run_id=run.run_id).order_by("seq")[10]
    Step.objects.filter(pk=cut.pk).update(next_step_id=None)
    chain = selectors.step_chain(run_id=run.run_id)
    assert chain.on_chain == 11 < len(chain.pks)
    _same_as_the_chain(run.run_id, per_page=7)
