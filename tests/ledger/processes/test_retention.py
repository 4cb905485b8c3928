"""Retention: prune_runs archives finished runs' step rows and deletes them; the run rows,
their outcomes and the audit stay, the pages still render and the archive loads back."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from ledger import selectors, transitions
from ledger.errors import NotAllowed
from ledger.models import AuditAction, AuditEvent, Run, RunArchive, Step
from ledger.processes import retention
from tests.support.dashboard_runs import reconciliation_run, restore_roles, user_in
from tests.support.retention import finished_survey

pytestmark = pytest.mark.django_db(transaction=True)


def store_at(directory: Path) -> dict[str, Any]:
    """settings.STORAGES with the archive store in ``directory``."""
    return {
        **settings.STORAGES,
        retention.ARCHIVE_STORAGE: {
            "BACKEND": "ledger.processes.retention.DirectoryStorage",
            "OPTIONS": {"location": str(directory)},
        },
    }


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


def test_prune_archives_old_finished_runs_and_their_pages_and_audit_still_render(
    execute, clock, crash_at, tmp_path, capsys
) -> None:
    restore_roles()
    old = finished_survey(execute, clock, days_ago=40, records=5)
    recent = finished_survey(execute, clock, days_ago=1, records=2)
    clock.now = timezone.now() - timedelta(days=40)
    blocked = reconciliation_run(execute, crash_at)  # needs attention: not finished
    old_steps = list(Step.objects.filter(run=old).order_by("seq").values_list("step_id", flat=True))
    counts = {r.run_id: Step.objects.filter(run=r).count() for r in (recent, blocked)}
    assert len(old_steps) >= 5

    call_command(
        "prune_runs", "--finished-before", "30d", "--archive-dir", str(tmp_path), "--batch", "2"
    )
    out = capsys.readouterr().out
    assert "pruned 1 runs" in out and f"archived to {tmp_path} in 1 files" in out

    assert not Step.objects.filter(run=old).exists()
    assert {r: Step.objects.filter(run_id=r).count() for r in counts} == counts
    kept = Run.objects.get(pk=old.run_id)
    assert (kept.status, kept.result, kept.version) == ("succeeded", old.result, old.version)
    archive = RunArchive.objects.get(pk=old.run_id)
    assert (archive.steps, archive.deleted, archive.kept) == (len(old_steps), len(old_steps), 0)
    assert archive.location.endswith(".jsonl.gz") and not Path(archive.location).is_absolute()
    path = tmp_path / archive.location
    rows = retention.read_archive(path)
    header = next(rows)
    assert header == {
        "archive": retention.FORMAT, "runs": {old.run_id: len(old_steps)}, "steps": len(old_steps)
    }  # fmt: skip
    assert [row["step_id"] for row in rows] == old_steps
    assert retention.file_sha256(path) == archive.sha256
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

    with override_settings(STORAGES=store_at(tmp_path)):
        call_command("show_archive", old.run_id)
    shown = capsys.readouterr().out
    assert f"archive of run {old.run_id}: {len(old_steps)} steps" in shown
    assert all(step_id in shown for step_id in old_steps)

    with pytest.raises(NotAllowed, match="archived by retention"):
        transitions.run_fork(run_id=old.run_id, step_id=old_steps[0], by="ops", reason="look")

    call_command("prune_runs", "--finished-before", "30d", "--archive-dir", str(tmp_path))
    assert "pruned 0 runs" in capsys.readouterr().out


def test_an_interrupted_prune_is_finished_by_the_next_one(execute, clock, tmp_path) -> None:
    old = finished_survey(execute, clock, days_ago=40, records=4)
    total = Step.objects.filter(run=old).count()
    store = retention.DirectoryStorage(location=tmp_path)
    location, digest, counts = retention.write_archive(runs=[old], store=store)
    transitions.run_archive_record(
        run_id=old.run_id,
        location=location,
        sha256=digest,
        steps=counts[old.run_id],
        run_version=old.version,
        by="test",
        reason="interrupted",
    )
    assert transitions.steps_delete_archived(run_ids=[old.run_id], limit=1) == 1  # then "crash"

    done = retention.prune_finished(
        finished_before=timezone.now() - timedelta(days=30), store=store, by="test"
    )
    assert (done.runs, done.archived, done.deleted) == (1, 0, total - 1)
    assert not Step.objects.filter(run=old).exists()
    assert RunArchive.objects.get(pk=old.run_id).deleted == total


def test_prune_refuses_a_cutoff_it_cannot_read(tmp_path) -> None:
    with pytest.raises(CommandError, match="give an age"):
        call_command("prune_runs", "--finished-before", "last month")


def test_prune_stops_at_its_budget_and_the_next_pass_finishes(execute, clock, tmp_path) -> None:
    runs = [finished_survey(execute, clock, days_ago=40 - i, records=1) for i in range(5)]
    store = retention.DirectoryStorage(location=tmp_path)
    ticks = iter(range(100))  # a fake monotonic clock: one second more at every reading
    cutoff = timezone.now() - timedelta(days=30)

    done = retention.prune_finished(
        finished_before=cutoff, store=store, by="beat:prune", runs_per_file=2, budget=2.5,
        timer=lambda: float(next(ticks)),
    )  # fmt: skip

    assert (done.runs, done.files, done.more) == (4, 2, True)
    archived = dict(RunArchive.objects.values_list("run_id", "location"))
    assert set(archived) == {r.run_id for r in runs[:4]}  # the oldest first
    assert len(set(archived.values())) == 2  # two runs a file
    assert Step.objects.filter(run=runs[4]).exists()
    assert not Step.objects.filter(run__in=runs[:4]).exists()

    done = retention.prune_finished(finished_before=cutoff, store=store, by="beat:prune")
    assert (done.runs, done.files, done.more) == (1, 1, False)
    assert not Step.objects.filter(run__in=runs).exists()
    for run in runs:
        archive = RunArchive.objects.get(pk=run.run_id)
        rows = retention.read_archive(tmp_path / archive.location, run_id=run.run_id)
        assert next(rows)["steps"] == archive.steps == archive.deleted
        assert {row["run_id"] for row in rows} == {run.run_id}


def test_an_archive_is_read_back_on_another_machine_with_its_own_var_dir(
    execute, clock, tmp_path
) -> None:
    from harness.cluster import database_url

    old = finished_survey(execute, clock, days_ago=40, records=3)
    steps = list(Step.objects.filter(run=old).order_by("seq").values_list("step_id", flat=True))
    here = tmp_path / "here" / "archive"
    with override_settings(STORAGES=store_at(here)):
        call_command("prune_runs", "--finished-before", "30d")
    assert not Step.objects.filter(run=old).exists()
    there = tmp_path / "there"
    shutil.copytree(here, there / "mnt" / "archive")  # the same store, mounted elsewhere
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    environ.update(
        DATABASE_URL=database_url(),
        RUNLEDGER_VAR_DIR=str(there / "var"),
        RUNLEDGER_ARCHIVE_DIR=str(there / "mnt" / "archive"),
    )
    shown = subprocess.run(
        [sys.executable, "manage.py", "show_archive", old.run_id], cwd=settings.BASE_DIR,
        env=environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"archive of run {old.run_id}: {len(steps)} steps" in shown.stdout
    assert all(step_id in shown.stdout for step_id in steps)


def test_show_archive_refuses_a_file_changed_since_it_was_written(
    execute, clock, tmp_path, capsys
) -> None:
    old = finished_survey(execute, clock, days_ago=40, records=2)
    with override_settings(STORAGES=store_at(tmp_path)):
        call_command("prune_runs", "--finished-before", "30d")
        capsys.readouterr()
        path = tmp_path / RunArchive.objects.get(pk=old.run_id).location
        path.write_bytes(gzip.compress(path.read_bytes()[:-1]))
        with pytest.raises(CommandError, match="does not match the digest"):
            call_command("show_archive", old.run_id)
    assert capsys.readouterr().out == ""


def test_prune_refuses_bad_sizes_and_writes_nothing(execute, clock, tmp_path) -> None:
    old = finished_survey(execute, clock, days_ago=40, records=2)
    before = Step.objects.filter(run=old).count()
    for option in ("--batch", "--runs-per-file", "--max-runs", "--budget"):
        with pytest.raises(CommandError, match="at least 1"):
            call_command("prune_runs", "--finished-before", "30d", option, "0",
                         "--archive-dir", str(tmp_path))  # fmt: skip
    assert Step.objects.filter(run=old).count() == before
    assert not RunArchive.objects.exists() and list(tmp_path.iterdir()) == []


def test_an_archive_of_the_first_format_at_its_absolute_path_is_still_read(
    execute, clock, tmp_path, capsys
) -> None:
    old = finished_survey(execute, clock, days_ago=40, records=2)
    rows = list(Step.objects.filter(run=old).order_by("seq").values())
    path = tmp_path / "2026-10" / f"{old.run_id}.jsonl.gz"
    path.parent.mkdir()
    header = {"archive": "runledger.steps/1", "run_id": old.run_id, "steps": len(rows)}
    with gzip.open(path, "wb") as out:
        for line in [header, *rows]:
            out.write(retention._line(line))
    transitions.run_archive_record(
        run_id=old.run_id, location=str(path), sha256=retention.file_sha256(path),
        steps=len(rows), run_version=old.version, by="0.1", reason="archived by 0.1",
    )  # fmt: skip
    call_command("show_archive", old.run_id)
    shown = capsys.readouterr().out
    assert f"archive of run {old.run_id}: {len(rows)} steps" in shown
    assert all(row["step_id"] in shown for row in rows)


def test_a_tick_from_the_mark_starts_past_the_runs_already_pruned(execute, clock, tmp_path) -> None:
    runs = [finished_survey(execute, clock, days_ago=40 - i, records=1) for i in range(4)]
    store = retention.DirectoryStorage(location=tmp_path)
    cutoff = timezone.now() - timedelta(days=30)
    done = retention.prune_finished(
        finished_before=cutoff, store=store, by="beat:prune", runs_per_file=1, max_runs=2
    )
    assert (done.runs, done.more) == (2, True)
    assert selectors.retention_mark() == (runs[1].finished_at, runs[1].run_id)
    # A run before the mark that still has rows (put back here by hand) is not walked again
    # from the mark; a walk from the start finds it.
    RunArchive.objects.filter(pk=runs[0].run_id).delete()
    donor = finished_survey(execute, clock, days_ago=1, records=1)
    Step.objects.filter(run=donor).update(run_id=runs[0].run_id)

    done = retention.prune_finished(
        finished_before=cutoff, store=store, by="beat:prune", from_mark=True
    )
    assert done.runs == 2 and not Step.objects.filter(run__in=runs[2:]).exists()
    assert Step.objects.filter(run=runs[0]).exists()
    assert selectors.retention_mark() == (runs[3].finished_at, runs[3].run_id)

    done = retention.prune_finished(finished_before=cutoff, store=store, by="prune_runs")
    assert done.runs == 1 and not Step.objects.filter(run__in=runs).exists()


HOSTILE = 'back\\slash "quoted" new\nline tab\t \x01\x02 <b>é</b> 💥 \\u0000 , ;'


def test_an_archive_holds_every_column_of_every_row_exactly_whatever_the_text(
    execute, clock, tmp_path
) -> None:
    """The archive's lines come from PostgreSQL (row_to_json through COPY): backslashes,
    quotes, newlines, tabs and the bytes COPY's CSV uses as its quote and delimiter come back
    as they were stored, and every column is there by name."""
    old = finished_survey(execute, clock, days_ago=40, records=3)
    first = Step.objects.filter(run=old).order_by("seq").first()
    assert first is not None
    Step.objects.filter(pk=first.pk).update(
        result={"text": HOSTILE, HOSTILE: [HOSTILE, 1.5, None, True]},
        error=HOSTILE,
        inputs={"q": HOSTILE},
    )
    before = {row["id"]: row for row in Step.objects.filter(run=old).values()}
    store = retention.DirectoryStorage(location=tmp_path)
    done = retention.prune_finished(
        finished_before=timezone.now() - timedelta(days=30), store=store, by="test"
    )
    assert done.runs == 1 and not Step.objects.filter(run=old).exists()

    rows = retention.read_archive(tmp_path / RunArchive.objects.get(pk=old.run_id).location)
    assert next(rows)["steps"] == len(before)
    archived = list(rows)
    assert [row["id"] for row in archived] == sorted(before, key=lambda pk: before[pk]["seq"])
    for row in archived:
        stored = before[row["id"]]
        assert set(row) == set(stored)
        for name, value in stored.items():
            if hasattr(value, "isoformat"):
                assert datetime.fromisoformat(row[name]) == value, name
            else:
                assert row[name] == value, name
    assert archived[0]["result"][HOSTILE] == [HOSTILE, 1.5, None, True]
    assert archived[0]["error"] == HOSTILE
