"""The tasks' crash point exists only while the harness has installed it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness import apps as harness_apps
from ledger import transitions
from ledger.examples import faults
from ledger.models import Run
from runs import tasks

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def reached() -> Iterator[list[str]]:
    seen: list[str] = []
    faults.set_hook(harness_apps.AFTER_EXECUTE, lambda: seen.append(harness_apps.AFTER_EXECUTE))
    yield seen
    faults.clear_hooks()
    harness_apps.uninstall()


def test_without_the_harness_a_task_reaches_no_fault_point(reached) -> None:
    assert tasks.after_execute_hook is None
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    assert tasks.start_run.apply(args=[run.run_id]).get() == "succeeded"
    assert reached == []


def test_with_the_harness_a_task_reaches_its_point_after_the_outcome_commits(reached) -> None:
    harness_apps.install()
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    assert tasks.start_run.apply(args=[run.run_id]).get() == "succeeded"
    assert reached == [harness_apps.AFTER_EXECUTE]
    assert Run.objects.get(pk=run.run_id).status == "succeeded"
