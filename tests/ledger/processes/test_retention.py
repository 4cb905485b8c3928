"""Retention: prune_runs archives finished runs' step rows and deletes them; the run rows,
their outcomes and the audit stay, the pages still render and the archive loads back."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ledger import transitions
from ledger.errors import NotAllowed
from ledger.models import AuditAction, AuditEvent, Run, RunArchive, Step
from ledger.processes import retention
from tests.support.dashboard_runs import reconciliation_run, restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


def _survey(execute, clock, *, days_ago: float, records: int) -> Run:
    clock.now = timezone.now() - timedelta(days=days_ago)
    run = transitions.run_start(agent="survey", inputs={"records": records}, clock=clock)
    assert execute(run.run_id).status == "succeeded"
    return Run.objects.get(pk=run.run_id)


def test_prune_archives_old_finished_runs_and_their_pages_and_audit_still_render(
    execute, clock, crash_at, tmp_path, capsys
) -> None:
    restore_roles()
    old = _survey(execute, clock, days_ago=40, records=5)
    recent = _survey(execute, clock, days_ago=1, records=2)
    clock.now = timezone.now() - timedelta(days=40)
    blocked = reconciliation_run(execute, crash_at)  # needs attention: not finished
    old_steps = list(Step.objects.filter(run=old).order_by("seq").values_list("step_id", flat=True))
    counts = {r.run_id: Step.objects.filter(run=r).count() for r in (recent, blocked)}
    assert len(old_steps) >= 5

    call_command(
        "prune_runs", "--finished-before", "30d", "--archive-dir", str(tmp_path), "--batch", "2"
    )
    assert "pruned 1 runs" in capsys.readouterr().out

    assert not Step.objects.filter(run=old).exists()
    assert {r: Step.objects.filter(run_id=r).count() for r in counts} == counts
    kept = Run.objects.get(pk=old.run_id)
    assert (kept.status, kept.result, kept.version) == ("succeeded", old.result, old.version)
    archive = RunArchive.objects.get(pk=old.run_id)
    assert (archive.steps, archive.deleted, archive.kept) == (len(old_steps), len(old_steps), 0)
    assert archive.location.startswith(str(tmp_path)) and archive.location.endswith(".jsonl.gz")
    rows = retention.read_archive(Path(archive.location))
    header = next(rows)
    assert header == {"archive": retention.FORMAT, "run_id": old.run_id, "steps": len(old_steps)}
    assert [row["step_id"] for row in rows] == old_steps
    assert retention.file_sha256(Path(archive.location)) == archive.sha256
    event = AuditEvent.objects.get(run_id=old.run_id, action=AuditAction.RUN_ARCHIVE)
    assert event.after["location"] == archive.location and event.actor.startswith("cli:")

    from django.test import Client

    client = Client()
    client.force_login(user_in("viewer"))
    page = client.get(f"/runs/{old.run_id}/")
    assert page.status_code == 200
    assert "archived by retention" in page.content.decode()
    assert archive.location in page.content.decode()
    audit = client.get(f"/audit/?run={old.run_id}")
    assert audit.status_code == 200 and old.run_id in audit.content.decode()

    call_command("show_archive", old.run_id)
    shown = capsys.readouterr().out
    assert f"archive of run {old.run_id}: {len(old_steps)} steps" in shown
    assert all(step_id in shown for step_id in old_steps)

    with pytest.raises(NotAllowed, match="archived by retention"):
        transitions.run_fork(run_id=old.run_id, step_id=old_steps[0], by="ops", reason="look")

    call_command("prune_runs", "--finished-before", "30d", "--archive-dir", str(tmp_path))
    assert "pruned 0 runs" in capsys.readouterr().out


def test_an_interrupted_prune_is_finished_by_the_next_one(execute, clock, tmp_path) -> None:
    old = _survey(execute, clock, days_ago=40, records=4)
    total = Step.objects.filter(run=old).count()
    location, digest, count = retention.write_archive(run=old, directory=tmp_path)
    transitions.run_archive_record(
        run_id=old.run_id,
        location=str(location),
        sha256=digest,
        steps=count,
        run_version=old.version,
        by="test",
        reason="interrupted",
    )
    assert transitions.steps_delete_archived(run_id=old.run_id, limit=1) == 1  # then "crash"

    done = retention.prune_finished(
        finished_before=timezone.now() - timedelta(days=30), directory=tmp_path, by="test"
    )
    assert (done.runs, done.archived, done.deleted) == (1, 0, total - 1)
    assert not Step.objects.filter(run=old).exists()
    assert RunArchive.objects.get(pk=old.run_id).deleted == total


def test_prune_refuses_a_cutoff_it_cannot_read(tmp_path) -> None:
    with pytest.raises(CommandError, match="give an age"):
        call_command("prune_runs", "--finished-before", "last month")
