"""The command line at parity with the dashboard (issue 10): cancel, retry, fork, clean run,
settle (propose/approve/reject), resume refused when it would stop again; each audited as
``cli:<login>``, each with its exit code: 0 done as asked, 1 refused (nothing written),
2 bad arguments, 3 done but the run did not end succeeded, 141 the reader went away."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from ledger.examples.models import GatewayCharge
from ledger.models import AuditEvent, Run, Settlement, Step
from runs.operations.management.commands.list_runs import Command as ListRuns
from tests.support import plan_change

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def replanned() -> Iterator[None]:
    """An agent whose second step is renamed by a 'deploy' (refuse: a divergence)."""
    plan_change.register()
    yield
    plan_change.unregister()


def run_cmd(*args: str) -> tuple[int, str]:
    """The exit code and output of a command run in this process."""
    out = StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"CommandError: {exc}"
    return 0, out.getvalue()


def actions(run_id: str) -> list[tuple[str, str]]:
    return [
        (e.action, e.actor) for e in AuditEvent.objects.filter(run_id=run_id).order_by("at", "id")
    ]


ME = f"cli:{getpass.getuser()}"


def test_cancel_run_cancels_a_queued_run_and_refuses_a_finished_one() -> None:
    code, _ = run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}')
    run = Run.objects.get()
    assert (code, run.status) == (0, "queued")
    code, out = run_cmd("cancel_run", run.run_id, "--reason", "the customer withdrew")
    assert (code, Run.objects.get().status) == (0, "cancelled")
    assert f"run {run.run_id}: cancelled" in out
    assert actions(run.run_id)[-1] == ("run_cancel", ME)
    code, out = run_cmd("cancel_run", run.run_id, "--reason", "again")
    assert code == 1 and "already cancelled" in out
    assert run_cmd("cancel_run", "run_no", "--reason", "x") == (1, "CommandError: no run run_no")
    code, out = run_cmd("cancel_run", run.run_id)  # no reason: a usage error, nothing written
    assert code != 0 and "--reason" in out
    assert len(actions(run.run_id)) == 2


def test_retry_run_retries_a_failed_run_and_exits_3_when_it_fails_again() -> None:
    run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_404"}', "--inline")
    run = Run.objects.get()
    code, out = run_cmd("retry_run", run.run_id, "--reason", "try once more", "--inline")
    assert code == 3 and "ended failed, not succeeded" in out
    assert Run.objects.get().resume_count == 1
    assert actions(run.run_id)[-1] == ("run_retry", ME)
    run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    ok = Run.objects.get(status="succeeded")
    code, out = run_cmd("retry_run", ok.run_id, "--inline")
    assert code == 1 and "retry applies to a run that is failed" in out


def test_start_run_validates_the_inputs_before_writing_anything() -> None:
    for inputs in ("[1, 2]", "{}", '{"invoice_id": ""}'):
        code, out = run_cmd("start_run", "refund", "--inputs", inputs, "--inline")
        assert code == 1 and "agent 'refund'" in out, (inputs, out)
    code, out = run_cmd("start_run", "refund", "--inline")  # no inputs at all
    assert code == 1 and "needs inputs invoice_id" in out
    assert not Run.objects.exists()
    code, out = run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    assert code == 0 and "succeeded" in out
    assert Run.objects.get().title == "Refund invoice inv_1001"


def test_fork_run_copies_the_ledger_to_a_step_and_finishes_the_fork() -> None:
    run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    source = Run.objects.get()
    code, out = run_cmd(
        "fork_run", source.run_id, "--step", "decide", "--reason", "redo the refund", "--inline"
    )
    assert code == 1 and "this fork would send 3 effects again under new keys" in out
    assert "refund (refund_charge, succeeded under key" in out and Run.objects.count() == 1
    code, out = run_cmd(
        "fork_run", source.run_id, "--step", "decide", "--reason", "redo the refund",
        "--send-again", "3", "--inline",
    )  # fmt: skip
    fork = Run.objects.exclude(pk=source.pk).get()
    assert code == 0 and (fork.status, fork.parent_id, fork.parent_kind) == (
        "succeeded",
        source.run_id,
        "fork",
    )
    assert f"fork {fork.run_id} of {source.run_id}" in out
    assert actions(fork.run_id) == [("run_fork", ME)]
    code, out = run_cmd("fork_run", source.run_id, "--step", "nope", "--reason", "x")
    assert code == 1 and "has no step 'nope'" in out
    assert Run.objects.count() == 2


def test_a_diverged_run_is_not_resumed_but_replaced_by_a_clean_run(replanned) -> None:
    code, _ = run_cmd("start_run", plan_change.NAME, "--inputs", '{"who": "ada"}', "--inline")
    old = Run.objects.get()
    assert (code, old.status) == (3, "failed")
    plan_change.deploy()  # the deploy renamed step b to c
    code, out = run_cmd("resume_run", old.run_id, "--inline")
    old.refresh_from_db()
    assert code == 1 and "diverges" in out and "start a clean run" in out
    assert (old.status, old.resume_count) == ("failed", 0)  # no resume spent
    code, out = run_cmd("clean_run", old.run_id, "--reason", "the plan changed", "--inline")
    new = Run.objects.exclude(pk=old.pk).get()
    old.refresh_from_db()
    assert code == 0 and f"clean run {new.run_id} replaces {old.run_id}" in out
    assert (new.status, new.parent_id, new.parent_kind, new.title) == (
        "succeeded",
        old.run_id,
        "clean",
        "Plan for ada",
    )
    assert new.result == {"second": 2}
    assert old.status == "failed"  # finished already: it stays as it ended
    assert actions(old.run_id)[-1] == ("run_clean", ME)
    assert actions(new.run_id) == [("run_clean", ME)]
    code, out = run_cmd("clean_run", "run_nope", "--reason", "x")
    assert code == 1


def test_a_clean_run_cancels_the_blocked_run_it_replaces(replanned) -> None:
    run_cmd("start_run", plan_change.NAME, "--inputs", '{"who": "ada"}', "--inline")
    plan_change.deploy()
    old = Run.objects.get()
    run_cmd("resume_run", old.run_id, "--anyway", "--inline")
    code, _ = run_cmd("clean_run", old.run_id, "--reason", "the plan changed")
    new = Run.objects.exclude(pk=old.pk).get()
    old.refresh_from_db()
    assert code == 0 and new.status == "queued" and new.parent_id == old.run_id
    assert old.status == "cancelled" and f"replaced by clean run {new.run_id}" in old.detail


def test_resume_anyway_spends_a_resume_the_preview_advised_against(replanned) -> None:
    run_cmd("start_run", plan_change.NAME, "--inputs", '{"who": "ada"}', "--inline")
    plan_change.deploy()
    old = Run.objects.get()
    code, _ = run_cmd("resume_run", old.run_id, "--anyway", "--inline")
    old.refresh_from_db()
    assert code == 3 and (old.status, old.reason, old.resume_count) == (
        "needs_attention",
        "divergence",
        1,
    )


def _stuck_renewal(execute: Any, crash_at: Any) -> Run:
    run = Run.objects.get(pk=call_start_renewal())
    crash_at("gateway.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "reconciliation")
    return Run.objects.get(pk=run.run_id)


def call_start_renewal() -> str:
    from ledger import transitions

    return transitions.run_start(agent="renewal", inputs={"customer": "cus_hopper"}).run_id


def test_settle_propose_approve_with_four_eyes_then_the_run_finishes(
    execute, crash_at, monkeypatch, settings
) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    run = _stuck_renewal(execute, crash_at)
    ref = GatewayCharge.objects.get().reference
    code, out = run_cmd("resume_run", run.run_id)  # no read path: a resume would stop again
    assert code == 1 and "settle it first" in out
    listed = run_cmd("settle", "list")[1]
    assert run.run_id in listed and "Renew the subscription of cus_hopper" in listed
    code, out = run_cmd("settle", "propose", run.run_id, "charge", "--outcome", "happened")
    assert code == 1 and "--reason" in out  # a usage error: nothing proposed
    code, out = run_cmd(
        "settle", "propose", run.run_id, "charge", "--outcome", "happened",
        "--result", '{"gateway_ref": ', "--reason", "the gateway's report",
    )  # fmt: skip
    assert code == 1 and "--result is not valid JSON" in out
    code, out = run_cmd(
        "settle", "propose", run.run_id, "charge", "--outcome", "happened",
        "--result", f'{{"gateway_ref": "{ref}"}}', "--reason", "the gateway's report",
    )  # fmt: skip
    settlement = Settlement.objects.get()
    assert code == 0 and settlement.status == "proposed"
    assert f"settlement #{settlement.pk}" in out
    code, out = run_cmd("settle", "approve", str(settlement.pk))
    assert code == 1 and "a different person must approve" in out
    monkeypatch.setenv("LOGNAME", "arthur")
    code, out = run_cmd("settle", "approve", str(settlement.pk), "--reason", "checked")
    settlement.refresh_from_db()
    assert code == 0 and settlement.status == "applied"
    assert settlement.decided_by_name == "cli:arthur"
    assert Step.objects.get(run=run, step_id="charge").status == "succeeded"
    assert Run.objects.get(pk=run.run_id).status == "queued"
    code, out = run_cmd("resume_run", run.run_id, "--inline")
    assert code == 1  # queued already: resume is for a stopped run
    code, out = run_cmd("settle", "reject", str(settlement.pk), "--reason", "late")
    assert code == 1 and GatewayCharge.objects.count() == 1
    assert run_cmd("settle", "approve", "999999")[0] == 1


def test_settle_reject_leaves_the_step_for_another_proposal(execute, crash_at, settings) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    run = _stuck_renewal(execute, crash_at)
    run_cmd(
        "settle", "propose", run.run_id, "charge", "--outcome", "not_happened", "--reason", "no"
    )
    settlement = Settlement.objects.get()
    code, out = run_cmd("settle", "reject", str(settlement.pk), "--reason", "it did happen")
    settlement.refresh_from_db()
    assert code == 0 and settlement.status == "rejected"
    assert Step.objects.get(run=run, step_id="charge").status == "started"
    assert [a for a, _ in actions(run.run_id)][-2:] == ["settlement_propose", "settlement_reject"]
    code, out = run_cmd("settle", "propose", run.run_id, "nope", "--outcome", "abandon",
                        "--reason", "x")  # fmt: skip
    assert code == 1 and "has no step 'nope'" in out


def test_list_runs_refuses_a_bad_limit_and_finds_runs_by_title() -> None:
    run_cmd("start_run", "refund", "--inputs", '{"invoice_id": "inv_1001"}', "--inline")
    code, out = run_cmd("list_runs", "--limit", "-1")
    assert code != 0 and "-1 is not between 1 and 10000" in out
    out = run_cmd("list_runs", "--search", "inv_1001")[1]
    assert "Refund invoice inv_1001" in out and "1 run(s)" in out
    assert "0 run(s)" in run_cmd("list_runs", "--search", "invoice_id:inv_9")[1]


def test_a_closed_pipe_ends_the_output_quietly_with_141(monkeypatch) -> None:
    for i in range(30):
        run_cmd("start_run", "refund", "--inputs", f'{{"invoice_id": "inv_{i}"}}')
    read, write = os.pipe()
    os.close(read)  # `| head` has gone away
    stream = os.fdopen(write, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", stream)
    with pytest.raises(SystemExit) as exited:
        ListRuns().run_from_argv(["manage.py", "list_runs"])
    assert exited.value.code == 141


def test_bad_arguments_exit_2_from_the_command_line_without_a_traceback(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["RUNLEDGER_VAR_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "list_runs", "--limit", "-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "-1 is not between 1 and 10000" in done.stderr
