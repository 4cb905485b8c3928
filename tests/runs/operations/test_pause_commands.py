"""`pause`, `unpause`, `pauses` and the executions in `show_run`: exit codes, the count shown
before a lift, refusals that write nothing."""

from __future__ import annotations

import pytest

from harness.unannounced import start_unannounced
from ledger.models import AuditEvent, Pause, Run
from tests.support.commands import run_cmd

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def test_pause_an_unknown_tool_is_refused_with_exit_1_and_nothing_written() -> None:
    code, out = run_cmd("pause", "--tool", "nope", "--reason", "x")
    assert code == 1 and "no tool named 'nope' is registered" in out
    assert Pause.objects.count() == AuditEvent.objects.count() == 0


def test_pause_then_unpause_shows_the_count_first_and_queues_the_held_runs(execute) -> None:
    code, out = run_cmd("pause", "--tool", "refund_charge", "--reason", "provider down")
    assert code == 0 and "refund_charge paused" in out
    pause = Pause.objects.get()
    assert AuditEvent.objects.get().actor.startswith("cli:")
    run = start_unannounced(agent="refund", inputs={"invoice_id": "inv_1001"})
    assert execute(run.run_id).status == "paused"
    code, out = run_cmd("pauses")
    assert code == 0 and "refund_charge" in out and " 1  " in out

    code, out = run_cmd("unpause", str(pause.pk), "--reason", "back")
    assert code == 0 and "holds 1 runs" in out and run.run_id in out
    assert Run.objects.get(pk=run.run_id).status == "paused"  # shown, not lifted
    code, out = run_cmd("unpause", str(pause.pk), "--reason", "back", "--yes", "--expect", "2")
    assert code == 1 and "holds 1 runs now, not the 2" in out
    assert Run.objects.get(pk=run.run_id).status == "paused"
    code, out = run_cmd("unpause", str(pause.pk), "--reason", "back", "--yes", "--expect", "1")
    assert code == 0 and "1 runs queued" in out
    assert Run.objects.get(pk=run.run_id).status == "queued"
    code, out = run_cmd("unpause", str(pause.pk), "--reason", "again", "--yes")
    assert code == 1 and "was lifted" in out

    assert execute(run.run_id).status == "succeeded"
    code, out = run_cmd("show_run", run.run_id)
    assert "#1   worker-1" in out and "paused" in out and "finished" in out
