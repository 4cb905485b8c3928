"""The modules that moved keep their old names for a deprecation period: importing one warns
and gives the same functions."""

from __future__ import annotations

import importlib
import sys

import pytest

pytestmark = pytest.mark.sqlite_ok

MOVED = [
    ("ledger.worker", "ledger.processes.execute", "run_execute"),
    ("ledger.worker", "ledger.processes.sweep", "runs_sweep"),
    ("ledger.preview", "ledger.processes.preview", "preview_resume"),
    ("ledger.deploy", "ledger.processes.deploy_check", "deploy_check"),
    ("ledger.effect_audit", "ledger.processes.effect_audit", "audit_effects"),
    ("ledger.notify", "ledger.processes.delivery", "deliver_due"),
    ("ledger.retention", "ledger.processes.retention", "prune_finished"),
    ("runs.tasks", "runs.operations.tasks", "start_run"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_module_name_warns_and_gives_the_same_function(old, new, name) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to .*{new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
