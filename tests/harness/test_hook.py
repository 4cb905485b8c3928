"""The product's fault points do nothing until the development equipment installs its registry."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import faults
from ledger import faultpoints, transitions
from ledger.models import Run
from runs.operations import tasks

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reached() -> Iterator[list[str]]:
    seen: list[str] = []
    faults.set_hook("task.after_execute", lambda: seen.append("task.after_execute"))
    yield seen
    faults.clear_hooks()
    faultpoints.install(faults.point)


def test_a_deployment_installs_no_fault_hook(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RUNLEDGER_") and k != "DJANGO_SETTINGS_MODULE"
    }
    env["RUNLEDGER_VAR_DIR"] = str(tmp_path)
    code = (
        "import django, sys; django.setup(); from ledger import faultpoints;"
        "print(faultpoints.installed(), 'harness' in sys.modules, 'harness.faults' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "runs.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["False", "False", "False"], out.stderr


def test_without_a_hook_a_task_reaches_its_point_and_nothing_happens(reached) -> None:
    faultpoints.install(None)
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    assert tasks.start_run.apply(args=[run.run_id]).get() == "succeeded"
    assert reached == []


def test_with_the_registry_a_task_reaches_its_point_after_the_outcome_commits(reached) -> None:
    statuses: list[str] = []
    faults.set_hook(
        "task.after_execute", lambda: statuses.append(Run.objects.get(pk=run.run_id).status)
    )
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1002"})
    assert tasks.start_run.apply(args=[run.run_id]).get() == "succeeded"
    assert statuses == ["succeeded"]
