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
    ("ledger.operations", "ledger.transitions", "run_cancel"),
    ("ledger.operations", "ledger.selectors", "settlement_queue"),
    ("ledger.operations.bulk", "ledger.transitions.bulk", "bulk_apply"),
    ("ledger.operations.bulk", "ledger.selectors.bulk", "bulk_preview"),
    ("ledger.operations.edits", "ledger.transitions.edits", "run_admin_edit"),
    ("ledger.operations.edits", "ledger.selectors.operator", "edited_upstream"),
    ("ledger.operations.errors", "ledger.errors", "OperationError"),
    ("ledger.operations.queries", "ledger.selectors.operator", "settlement_evidence"),
    ("ledger.operations.runs", "ledger.transitions.actions", "run_fork"),
    ("ledger.operations.settle", "ledger.transitions.settle", "settlement_approve"),
    ("ledger.operations.stale", "ledger.transitions.stale", "step_accept_stale"),
]

#: What ``ledger.operations`` and its modules gave before they were split into
#: ``ledger.transitions`` and ``ledger.selectors`` (their ``__all__`` and public names then).
OPERATIONS_NAMES = {
    "ledger.operations": "BULK_ACTIONS RUN_EDITABLE STEP_EDITABLE Actor BulkOutcome BulkPlan "
    "BulkPlanItem Conflict EditMark Evidence InvalidInput NotAllowed OnCommit OperationError "
    "QueueItem ReconcileAnswer RunFilter SelfApproval approval_required audit_events bulk_apply "
    "bulk_preview edited_upstream parse_result_text run_admin_edit run_cancel run_fork "
    "run_reexecute_from run_resume run_retry settlement_approve settlement_evidence "
    "settlement_is_outdated settlement_propose settlement_queue settlement_queue_steps "
    "settlement_reject settlements_waiting step_accept_stale step_admin_edit "
    "step_reconcile_again validate_result",
    "ledger.operations.bulk": "BULK_ACTIONS BULK_LIMIT RunFilter BulkPlanItem BulkPlan "
    "BulkOutcome bulk_preview bulk_apply",
    "ledger.operations.edits": "STEP_EDITABLE RUN_EDITABLE step_admin_edit run_admin_edit "
    "EditMark edited_upstream",
    "ledger.operations.errors": "OperationError Conflict NotAllowed SelfApproval InvalidInput",
    "ledger.operations.queries": "QueueItem settlement_queue_steps settlement_queue Evidence "
    "settlement_evidence settlements_waiting settlement_is_outdated audit_events",
    "ledger.operations.runs": "run_resume run_retry run_cancel run_fork",
    "ledger.operations.settle": "approval_required ReconcileAnswer step_reconcile_again "
    "settlement_propose settlement_approve settlement_reject",
    "ledger.operations.stale": "step_accept_stale run_reexecute_from",
}


@pytest.mark.parametrize(("old", "new", "name"), MOVED)
def test_an_old_module_name_warns_and_gives_the_same_function(old, new, name) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to .*{new}"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


@pytest.mark.parametrize("old", sorted(OPERATIONS_NAMES))
def test_every_name_the_operator_api_gave_is_still_given(old: str) -> None:
    for name in [n for n in sys.modules if n == old or n.startswith(f"{old}.")]:
        sys.modules.pop(name)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to"):
        module = importlib.import_module(old)
    missing = [n for n in OPERATIONS_NAMES[old].split() if not hasattr(module, n)]
    assert missing == []


def test_from_the_old_package_import_an_old_module_gives_the_old_module() -> None:
    for name in [n for n in sys.modules if n.startswith("ledger.operations")]:
        sys.modules.pop(name)
    with pytest.warns(DeprecationWarning):
        from ledger.operations import bulk, errors

    assert bulk.__name__ == "ledger.operations.bulk" and hasattr(bulk, "RunFilter")
    assert errors.SelfApproval is importlib.import_module("ledger.errors").SelfApproval
