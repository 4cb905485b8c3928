"""The ``runledger`` command runs the project's management commands from any directory and lists
runledger's own commands apart from Django's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.sqlite_ok

ROOT = Path(__file__).resolve().parents[2]


def runledger(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNLEDGER_")}
    environ.pop("DJANGO_SETTINGS_MODULE", None)
    environ.pop("DATABASE_URL", None)  # the project's own default: a SQLite file in its VAR_DIR
    environ.update({"RUNLEDGER_VAR_DIR": str(tmp_path / "var"), **env})
    script = shutil.which("runledger", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "runs.cli"]
    return subprocess.run(
        [*command, *args], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300
    )


def test_help_lists_the_operator_commands_apart_from_djangos(tmp_path: Path) -> None:
    done = runledger(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    ours, _, theirs = done.stdout.partition("Django's and the libraries' commands:")
    for command in ("start_run", "resume_run", "settle", "list_runs", "check_deploy", "serve"):
        assert f"  {command} " in ours
    assert "migrate" in theirs and "  migrate " not in ours
    assert "worker" in ours and "beat" in ours


def test_a_management_command_runs_with_the_projects_settings_from_another_directory(
    tmp_path: Path,
) -> None:
    assert runledger(tmp_path, "migrate", "-v0").returncode == 0
    done = runledger(tmp_path, "list_runs")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "var" / "runledger.sqlite3").exists()  # the project's default database


def test_an_unknown_command_is_refused_clearly(tmp_path: Path) -> None:
    done = runledger(tmp_path, "no_such_command")
    assert done.returncode != 0
    assert "Unknown command: 'no_such_command'" in done.stderr


def test_worker_and_beat_are_celerys_own_commands_on_the_projects_app(tmp_path: Path) -> None:
    worker = runledger(tmp_path, "worker", "--help")
    assert worker.returncode == 0, worker.stderr
    assert "Usage: runledger worker" in worker.stdout and "--concurrency" in worker.stdout
    beat = runledger(tmp_path, "beat", "--help")
    assert beat.returncode == 0, beat.stderr
    assert "periodic task scheduler" in beat.stdout


def test_runs_in_flight_is_the_threads_pool_of_that_size(capsys) -> None:
    from runs.cli import _runs_in_flight

    assert _runs_in_flight(["-l", "info", "--runs-in-flight", "500"]) == [
        *("-l", "info"),
        *("-P", "threads", "-c", "500"),
    ]
    assert _runs_in_flight(["--runs-in-flight=8"]) == ["-P", "threads", "-c", "8"]
    assert _runs_in_flight(["-c", "4"]) == ["-c", "4"]  # prefork, as before
    for wrong, says in [
        (["--runs-in-flight", "many"], "takes a number of runs"),
        (["--runs-in-flight", "0"], "takes a number of runs"),
        (["--runs-in-flight", "50", "-c", "4"], "leave out -P and -c"),
        (["--runs-in-flight", "50", "--pool=prefork"], "leave out -P and -c"),
    ]:
        with pytest.raises(SystemExit) as stopped:
            _runs_in_flight(wrong)
        assert stopped.value.code == 2
        assert says in capsys.readouterr().err
