"""The operator commands and the tasks' handling of bad input, in this process."""

from __future__ import annotations

import getpass
import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger import transitions
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import AuditEvent, Run
from ledger.processes import execute
from runs.operations import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def exit_code(*args: str) -> tuple[int, str]:
    """The command's exit code and output (a CommandError carries the code it exits with)."""
    out = StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"CommandError: {exc}"
    return 0, out.getvalue()


def test_start_run_inline_executes_the_agent_and_prints_the_result() -> None:
    out = command("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    run = Run.objects.get()
    assert run.status == "succeeded" and run.agent == "refund"
    assert f"run {run.run_id}: succeeded" in out and run.result["charge_id"] in out
    assert ProviderCharge.objects.count() == OutboxMessage.objects.count() == 1


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ('{"invoice_id": ', "--inputs is not valid JSON"),
        ("{'invoice_id': 'inv_1001'}", "--inputs is not valid JSON"),
        ('{"amount": NaN}', "not valid JSON: NaN"),
    ],
)
def test_start_run_refuses_bad_json_with_a_clear_error(inputs: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        command("start_run", "refund", "--inputs", inputs, "--inline")
    assert not Run.objects.exists()


def test_start_run_takes_the_pacing_options() -> None:
    at = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    command(
        "start_run", "refund", "--inputs", '{"invoice_id": "inv_1"}',
        "--concurrency-key", "customer:cus_42", "--concurrency-limit", "2", "--priority", "7",
        "--start-at", at.isoformat(), "--deadline", "3600",
    )  # fmt: skip
    run = Run.objects.get()
    assert (run.concurrency_key, run.concurrency_limit, run.priority) == ("customer:cus_42", 2, 7)
    assert run.wake_at == at and run.deadline_at == at + timedelta(seconds=3600)
    for bad, says in [
        (["--priority", "10"], "priority"),
        (["--start-at", "2999-01-01T00:00:00Z"], "start_at"),
        (["--start-at", "tomorrow"], "ISO 8601"),
        (["--deadline", "-1"], "deadline"),
    ]:
        with pytest.raises(CommandError, match=says):
            command("start_run", "refund", "--inputs", '{"invoice_id": "inv_2"}', *bad)
    assert Run.objects.count() == 1


def test_start_run_names_the_registered_agents_when_the_agent_is_unknown() -> None:
    with pytest.raises(CommandError, match=r"no agent named 'refnud'.*refund"):
        command("start_run", "refnud", "--inline")
    assert not Run.objects.exists()


def test_resume_run_resumes_a_failed_run_and_raises_its_budget_only_upwards() -> None:
    code, _ = exit_code("start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}', "--inline")
    run = Run.objects.get()
    assert (run.status, code) == ("failed", 3)
    with pytest.raises(CommandError, match="raised, not lowered"):
        command("resume_run", run.run_id, "--max-resumes", "1", "--inline")
    code, out = exit_code("resume_run", run.run_id, "--max-resumes", "9", "--inline")
    run.refresh_from_db()
    assert (run.status, run.resume_count, run.max_resumes) == ("failed", 1, 9)
    assert f"run {run.run_id}: failed" in out and "ended failed, not succeeded" in out
    assert code == 3


def test_resume_run_refuses_missing_and_unstopped_runs() -> None:
    with pytest.raises(CommandError, match="no run run_missing"):
        command("resume_run", "run_missing", "--inline")
    command("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    run = Run.objects.get()
    with pytest.raises(CommandError, match="resume applies to a run that is needs attention or"):
        command("resume_run", run.run_id, "--inline")
    assert Run.objects.get().resume_count == 0


def test_list_runs_filters_by_status_and_show_run_prints_the_steps_in_order() -> None:
    command("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    exit_code("start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}', "--inline")
    ok = Run.objects.get(status="succeeded")
    failed = Run.objects.get(status="failed")
    listed = command("list_runs", "--status", "failed")
    assert failed.run_id in listed and ok.run_id not in listed and "1 run(s)" in listed
    with pytest.raises(CommandError, match="unknown status"):
        command("list_runs", "--status", "exploded")
    shown = command("show_run", ok.run_id).splitlines()
    order = ["fetch_invoice", "decided_at", "decide", "refund", "email_customer", "notify"]
    step_lines = [line.split()[1] for line in shown if line.strip()[:1].isdigit()]
    assert step_lines == order
    assert any("status succeeded" in line for line in shown)


def test_a_task_for_a_missing_run_logs_and_does_nothing(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="runs"):
        assert tasks.start_run.apply(args=("run_missing",)).get() is None
    assert "no such run" in caplog.text
    assert not Run.objects.exists()


def test_a_task_for_a_finished_run_logs_and_does_nothing(caplog) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute.run_execute(run_id=run.run_id, worker="w1")
    before = Run.objects.values().get(pk=run.run_id)
    with caplog.at_level(logging.INFO, logger="runs"):
        assert tasks.resume_run.apply(args=(run.run_id,)).get() is None
    assert "nothing recorded by this worker (the run was succeeded" in caplog.text
    assert Run.objects.values().get(pk=run.run_id) == before
    assert ProviderCharge.objects.count() == 1


def test_commands_that_change_runs_are_audited_under_the_person_running_them() -> None:
    exit_code("start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}', "--inline")
    run = Run.objects.get()
    exit_code("resume_run", run.run_id, "--reason", "the provider is back", "--inline")
    actor = f"cli:{getpass.getuser()}"
    events = list(AuditEvent.objects.filter(run_id=run.run_id).order_by("at", "id"))
    assert [(e.action, e.actor) for e in events] == [("run_start", actor), ("run_resume", actor)]
    assert events[1].reason == "the provider is back"
    assert (events[1].before["status"], events[1].after["status"]) == ("failed", "queued")
