"""``manage.py approvals``: list, show, approve, reject a gate from the command line, audited as
``cli:<login>``; refusals exit 1 and write nothing."""

from __future__ import annotations

import getpass
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from harness.unannounced import start_unannounced
from ledger.models import AuditEvent, Gate, Run
from ledger.processes.execute import run_execute
from ledger.processes.preview import preview_resume
from tests.support.commands import run_cmd

pytestmark = pytest.mark.django_db(transaction=True)

ME = f"cli:{getpass.getuser()}"


@pytest.fixture
def execute() -> Any:
    """One execution on the real clock (the command's approvals read the real clock too)."""
    return lambda run_id: run_execute(run_id=run_id, worker="worker-1", heartbeat=False)


def test_approvals_list_show_approve_and_the_refusals(execute) -> None:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    assert execute(run.run_id).reason == "approval"
    gate = Gate.objects.get()
    code, out = run_cmd("approvals", "list")
    assert code == 0 and f"#{gate.pk} {run.run_id} pay_out pay_out" in out
    code, out = run_cmd("approvals", "show", str(gate.pk))
    assert code == 0 and gate.arguments_text in out and gate.digest in out
    last = preview_resume(run_id=run.run_id).steps[-1]  # what the dry replay says of it
    assert (last.step_id, last.action) == ("pay_out", "execute")
    assert f"waits at approval gate #{gate.pk}" in last.detail

    code, out = run_cmd("approvals", "approve", str(gate.pk), "--reason", "checked")
    assert code == 0 and "approved (1/1 approved)" in out
    run.refresh_from_db()
    assert run.status == "queued"
    assert "it would be sent once" in preview_resume(run_id=run.run_id).steps[-1].detail
    event = AuditEvent.objects.get(action="gate_approve")
    assert (event.actor, event.reason) == (ME, "checked")

    before = (list(Gate.objects.values_list("status", "approved_by")), AuditEvent.objects.count())
    code, out = run_cmd("approvals", "approve", str(gate.pk))
    assert code == 1 and "already approved" in out
    code, out = run_cmd("approvals", "reject", str(gate.pk), "--reason", "late")
    assert code == 1 and "already approved" in out
    code, out = run_cmd("approvals", "approve", "999999")
    assert code == 1 and "no gate #999999" in out
    after = (list(Gate.objects.values_list("status", "approved_by")), AuditEvent.objects.count())
    assert after == before
    assert Run.objects.get().status == "queued"


def test_approvals_reject_needs_a_reason_and_queues_the_run(execute) -> None:
    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    execute(run.run_id)
    gate = Gate.objects.get()
    with pytest.raises(CommandError):
        call_command("approvals", "reject", str(gate.pk), stdout=StringIO())
    assert Gate.objects.get().status == "waiting"
    code, out = run_cmd("approvals", "reject", str(gate.pk), "--reason", "not ours")
    assert code == 0 and "rejected" in out
    assert Run.objects.get().status == "queued"


def test_the_gates_are_in_the_metrics_by_status(execute) -> None:
    from runs.operations import metrics

    def gauges() -> dict[str, str]:
        lines = metrics.exposition()[0].decode().splitlines()
        return {
            line.split(" ")[0]: line.split(" ")[1]
            for line in lines
            if line.startswith(("runledger_gates{", "runledger_gate_oldest"))
        }

    run = start_unannounced(agent="payout", inputs={"invoice_id": "inv_1003"})
    execute(run.run_id)
    waiting = gauges()
    assert waiting['runledger_gates{status="waiting"}'] == "1.0"
    assert float(waiting["runledger_gate_oldest_waiting_age_seconds"]) >= 0
    run_cmd("approvals", "approve", str(Gate.objects.get().pk))
    execute(run.run_id)
    assert gauges() == {
        'runledger_gates{status="used"}': "1.0",
        "runledger_gate_oldest_waiting_age_seconds": "0.0",
    }
